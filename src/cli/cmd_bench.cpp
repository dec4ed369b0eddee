// `diskformer bench`: a fixed prompt and decode length, timed, with the expert cache's telemetry and the peak
// RSS; --json ends with one JSON object on the last line (for scripts and docs/PERF.md).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "stream/byte_size.h"
#include "stream/cache_telemetry.h"
#include "stream/telemetry_json.h"
#include "util/error.h"

namespace df::cli {
namespace {

struct BenchFlags {
  ModelFlags model;
  int n_prompt = 64, n_decode = 32, repeats = 1;
  int parallel = 1;  // -np: sequences decoded together, one forward per step for all of them
  bool cold = false, json = false;
};

uint64_t status_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size()));
  return 0;
}

// Drops the page cache so that a --cold run reads the store from the disk. Needs root; says so otherwise.
bool drop_page_cache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f.flush());
}

void bench(const BenchFlags& f) {
  if (f.n_prompt < 1 || f.n_decode < 1) fail("bench needs -p >= 1 prompt tokens and -n >= 1 decode tokens");
  if (f.parallel < 1) fail("bench -np {}: at least one sequence is needed", f.parallel);
  if (f.cold && !drop_page_cache())
    fmt::print(stderr,
               "note: --cold could not drop the page cache (needs root): the store may be served from RAM\n");
  using clock = std::chrono::steady_clock;
  const auto t_load = clock::now();
  // The context holds the prompt and the decoded tokens; the memory is planned for exactly that.
  const int n_ctx = f.n_prompt + f.n_decode + 1;
  ModelFlags model_flags = f.model;
  model_flags.n_sequences = f.parallel;  // every sequence's state is in the memory plan
  OpenedModel m = open_from_flags(model_flags, n_ctx);
  const double load_s = std::chrono::duration<double>(clock::now() - t_load).count();
  const auto& info = m.model->info();

  // Fixed prompts: deterministic ids spread over the vocabulary (the tokens' meaning does not matter for
  // speed), a different one per sequence so that their routings differ as different users' would.
  const size_t n_seq = static_cast<size_t>(f.parallel);
  std::vector<std::vector<int32_t>> prompts(n_seq, std::vector<int32_t>(static_cast<size_t>(f.n_prompt)));
  for (size_t s = 0; s < n_seq; ++s)
    for (size_t i = 0; i < prompts[s].size(); ++i)
      prompts[s][i] = static_cast<int32_t>((i * 7919 + 13 + s * 104729) % static_cast<size_t>(info.n_vocab));

  double prefill_s = 0, decode_s = 0;
  // Each repetition's rates too: on a machine with every core busy the spread between them is a finding.
  std::vector<double> prefill_each, decode_each;
  stream::TelemetrySnapshot prefill_tel, decode_tel;
  stream::TelemetrySnapshot prefill_device_tel, decode_device_tel;  // the device tier, when there is one
  uint64_t kv_bytes = 0;
  for (int rep = 0; rep < f.repeats; ++rep) {
    std::vector<std::unique_ptr<Session>> sessions;
    for (size_t s = 0; s < n_seq; ++s) sessions.push_back(make_session(m, n_ctx));
    SessionBatch batch(n_seq, n_seq);
    batch.on_step = [&m](uint64_t tokens, uint64_t ns) { m.on_step(tokens, ns); };
    batch.on_failure = [&m] { m.on_failure(); };
    if (m.cache) m.cache->reset_telemetry();
    m.reset_device_telemetry();
    auto t0 = clock::now();
    for (size_t s = 0; s < n_seq; ++s) sessions[s]->prefill(prompts[s]);
    const double prefill_rep_s = std::chrono::duration<double>(clock::now() - t0).count();
    prefill_s += prefill_rep_s;
    prefill_each.push_back(static_cast<double>(f.n_prompt) * f.parallel / prefill_rep_s);
    if (m.cache) {
      prefill_tel = m.cache->telemetry();
      m.cache->reset_telemetry();
    }
    if (m.tiers) {
      prefill_device_tel = m.device_telemetry();
      m.reset_device_telemetry();
    }
    auto t1 = clock::now();
    if (n_seq == 1 && sessions[0]->greedy_ahead()) {
      // Greedy, each step queued before the previous token has come back (Session::greedy_start): the
      // tokens of the loop below.
      Session& s = *sessions[0];
      s.greedy_start(Sampler::argmax(s.logits()));
      for (int i = 1; i < f.n_decode; ++i) (void)s.greedy_next(true);
      s.greedy_finish();
    } else {
      for (int i = 0; i < f.n_decode; ++i) {
        for (auto& session : sessions)
          batch.add_token(*session, Sampler::argmax(session->logits()));  // greedy
        batch.run();
      }
    }
    const double decode_rep_s = std::chrono::duration<double>(clock::now() - t1).count();
    decode_s += decode_rep_s;
    decode_each.push_back(static_cast<double>(f.n_decode) * f.parallel / decode_rep_s);
    if (m.cache) decode_tel = m.cache->telemetry();
    if (m.tiers) decode_device_tel = m.device_telemetry();
    kv_bytes = 0;
    for (auto& session : sessions) kv_bytes += session->state_bytes();
  }
  m.finish_recording();
  const double prefill_tps = static_cast<double>(f.repeats) * f.n_prompt * f.parallel / prefill_s;
  // All sequences' tokens: the aggregate rate.
  const double decode_tps = static_cast<double>(f.repeats) * f.n_decode * f.parallel / decode_s;
  const uint64_t peak_rss = status_kib("VmHWM") * 1024;
  const uint64_t cache_bytes = m.cache ? m.cache->pool_bytes() : m.expert_bytes;
  const int threads = m.n_threads;

  fmt::print("model        {} ({}, {} layers, {} experts top-{})\n", f.model.display_name(), info.arch,
             info.n_layer, info.n_expert, info.n_expert_used);
  fmt::print("memory       experts {} ({}), trunk {}, KV {}, peak RSS {}\n",
             stream::format_bytes(cache_bytes), m.cache ? "cache" : "resident",
             stream::format_bytes(m.trunk_bytes), stream::format_bytes(kv_bytes),
             stream::format_bytes(peak_rss));
  // Each device's peak (a layer split's budgets are per card), and the highest of them.
  uint64_t peak_device = 0;
  for (size_t k = 0; k < m.backends.size(); ++k) {
    const auto& be = m.backends[k];
    const uint64_t peak = be->peak_device_bytes();
    peak_device = std::max(peak_device, peak);
    const auto [first, end] = m.layer_ranges[k];
    std::string layers;
    if (!m.expert_ranges.empty())
      layers = fmt::format(" ({}experts {}-{})", k == 0 ? "trunk, " : "", m.expert_ranges[k].first,
                           m.expert_ranges[k].second - 1);
    else if (m.backends.size() > 1)
      layers = fmt::format(" (layers {}-{})", first, end - 1);
    if (peak > 0)
      fmt::print("device       {}{}: peak {} allocated\n", be->name(), layers, stream::format_bytes(peak));
    else if (!layers.empty())
      fmt::print("device       {}{}\n", be->name(), layers);
  }
  fmt::print("load         {:.2f} s\n", load_s);
  if (f.parallel == 1) {
    fmt::print("prefill      {} tokens: {:.2f} tok/s\n", f.n_prompt, prefill_tps);
    fmt::print("decode       {} tokens: {:.2f} tok/s ({} threads)\n", f.n_decode, decode_tps, threads);
    if (f.repeats > 1)
      fmt::print("repetitions  prefill {:.2f} tok/s, decode {:.2f} tok/s\n", fmt::join(prefill_each, " / "),
                 fmt::join(decode_each, " / "));
  } else {
    fmt::print("prefill      {} sequences x {} tokens, one after another: {:.2f} tok/s\n", f.parallel,
               f.n_prompt, prefill_tps);
    fmt::print(
        "decode       {} sequences x {} tokens, one forward per step: {:.2f} tok/s in all, {:.2f} per "
        "sequence ({} threads)\n",
        f.parallel, f.n_decode, decode_tps, decode_tps / f.parallel, threads);
  }
  if (m.tiers)
    fmt::print("decode telemetry, device tier ({}; reads = copies up from RAM):\n{}\n",
               m.describe_device_tiers(), stream::format_telemetry_table(decode_device_tel));
  if (m.cache)
    fmt::print("decode telemetry{}:\n{}\n", m.tiers ? ", RAM tier (reads from disk)" : "",
               stream::format_telemetry_table(decode_tel));

  if (f.json) {
    nlohmann::json j;
    j["model"] = f.model.display_name();
    j["arch"] = info.arch;
    j["n_expert"] = info.n_expert;
    j["n_expert_used"] = info.n_expert_used;
    j["threads"] = threads;
    j["n_prompt"] = f.n_prompt;
    j["n_decode"] = f.n_decode;
    j["sequences"] = f.parallel;
    j["repeats"] = f.repeats;
    j["prefill_tps"] = prefill_tps;
    j["decode_tps"] = decode_tps;
    j["prefill_tps_each"] = prefill_each;
    j["decode_tps_each"] = decode_each;
    j["load_seconds"] = load_s;
    j["streaming"] = m.cache != nullptr;
    j["expert_cache_bytes"] = cache_bytes;
    j["trunk_bytes"] = m.trunk_bytes;
    j["kv_bytes"] = kv_bytes;
    j["peak_rss_bytes"] = peak_rss;
    j["device"] = m.backend ? std::string(m.backend->name()) : "cpu";
    j["peak_device_bytes"] = peak_device;
    nlohmann::json devices = nlohmann::json::array();
    for (size_t k = 0; k < m.backends.size(); ++k) {
      nlohmann::json d = {
          {"name", std::string(m.backends[k]->name())},
          {"first_layer", m.layer_ranges[k].first},
          {"end_layer", m.layer_ranges[k].second},
          {"peak_device_bytes", m.backends[k]->peak_device_bytes()},
          {"gpu_cache_bytes",
           m.device_tiers[k] ? m.device_tiers[k]->slots() * m.device_tiers[k]->slot_bytes() : 0}};
      if (!m.expert_ranges.empty()) {
        d["first_expert"] = m.expert_ranges[k].first;
        d["end_expert"] = m.expert_ranges[k].second;
      }
      devices.push_back(std::move(d));
    }
    j["devices"] = devices;
    j["split_mode"] = m.expert_ranges.empty() ? "layer" : "expert";
    // What ran, which is not always what was asked for (O_DIRECT or io_uring can fall back); resident runs
    // read nothing.
    j["lookahead"] = m.cache ? f.model.lookahead : 0;
    j["io"] = m.cache ? (m.cache->direct_io() ? "direct" : "buffered") : "none";
    j["reader"] = m.cache ? m.cache->reader_name() : "none";
    j["cache_policy"] = m.cache ? m.cache->policy_name() : "none";
    j["expert_cache_slots"] = m.cache ? m.cache->slots() : 0;
    j["cold"] = f.cold;
    if (m.cache) {
      j["hit_rate"] = decode_tel.hit_rate();
      j["cache_hit_rate"] = decode_tel.cache_hit_rate();
      j["bytes_per_token"] = decode_tel.bytes_per_token();
      j["io_wait_share"] = decode_tel.io_wait_share();
      j["read_bandwidth"] = decode_tel.read_bandwidth();
      j["prefetch_precision"] = decode_tel.prefetch_precision();
      j["prefetch_recall"] = decode_tel.prefetch_recall();
      j["prefill_telemetry"] = stream::telemetry_json(prefill_tel);
      j["decode_telemetry"] = stream::telemetry_json(decode_tel);
      if (m.tiers) {
        j["gpu_cache_bytes"] = m.device_tier_bytes();
        uint64_t slots = 0;
        for (const auto* t : m.device_tiers)
          if (t) slots += t->slots();
        j["gpu_cache_slots"] = slots;
        j["cpu_misses"] = f.model.cpu_misses;
        if (f.model.cpu_misses) j["miss_copies"] = f.model.miss_copies;
        j["gpu_hit_rate"] = decode_device_tel.hit_rate();
        j["gpu_copy_bytes_per_token"] = decode_device_tel.bytes_per_token();
        j["prefill_device_telemetry"] = stream::telemetry_json(prefill_device_tel);
        j["decode_device_telemetry"] = stream::telemetry_json(decode_device_tel);
      }
    } else {
      j["hit_rate"] = 1.0;
      j["cache_hit_rate"] = 1.0;
      j["bytes_per_token"] = 0;
      j["io_wait_share"] = 0.0;
    }
    std::puts(j.dump().c_str());
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* cmd =
      app.add_subcommand("bench", "time prefill and decode, with expert-cache telemetry and peak RSS");
  flags->model.add(cmd);
  cmd->add_option("-p,--n-prompt", flags->n_prompt, "prompt tokens")->capture_default_str();
  cmd->add_option("-n,--n-decode", flags->n_decode, "decoded tokens")->capture_default_str();
  cmd->add_option("--parallel", flags->parallel,
                  "-np N: sequences decoded together (one forward per step; decode tok/s is their sum)")
      ->capture_default_str();
  cmd->add_option("-r,--repeats", flags->repeats, "repetitions (fresh session each, warm cache)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--cold", flags->cold, "drop the page cache first (needs root)");
  cmd->add_flag("--json", flags->json, "end with one JSON object on the last line");
  cmd->callback([flags] { bench(*flags); });
}

}  // namespace df::cli

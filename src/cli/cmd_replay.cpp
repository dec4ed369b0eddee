// `diskformer replay TRACE`: a routing trace (llama.cpp llama-moe-trace CSV, ours from --record-routing, or a
// vLLM route log) through the expert cache's own bookkeeping and policies (stream/trace_replay.h), for a
// model's record size: hit rate, bytes read per decode token and the decode speed the disk allows. --sweep
// prints that against the budget (and --plot draws it), so that a cache can be sized before a model is
// downloaded. --json ends with one JSON object on the last line.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/svg_plot.h"
#include "gguf/gguf.h"
#include "store/plan.h"
#include "store/store.h"
#include "stream/byte_size.h"
#include "stream/trace_replay.h"
#include "util/atomic_file.h"
#include "util/comma_list.h"
#include "util/error.h"

namespace df::cli {
namespace {

// The random-read rate of this machine's disk for 5 MiB records (docs/PERF.md: lfm2-24b decode read 716 MiB
// per token at 2.05 tok/s); bench/scripts/disk_ceiling.sh measures another disk's.
constexpr double kDefaultDiskGbps = 1.54;

struct ReplayFlags {
  std::string trace, model, expert_cache, policies = "adaptive", layout = "shared", split = "even",
                                          order = "engine";
  std::string prefill = "cached", guess = "previous-token", plot, gpu_cache, ram_tier = "inclusive";
  std::optional<uint64_t> slots, record_bytes, gpu_slots;
  std::optional<int> slots_per_layer;
  std::vector<int> sweep;
  bool sweep_default = false, json = false, per_layer_table = false, guess_quality = false;
  int lookahead = 0, batch = 64;
  double disk_gbps = kDefaultDiskGbps;
  uint64_t lfu_period = 0;
  double crf_half_life = 128;
  int gate_window = 32, slru_percent = 25;
};

struct ModelRecords {
  uint64_t record_bytes = 0;
  int n_layers = 0, n_expert = 0;
  std::string from;
};

std::optional<ModelRecords> model_records(const ReplayFlags& f) {
  if (f.record_bytes) return ModelRecords{*f.record_bytes, 0, 0, "--record-bytes"};
  if (f.model.empty()) return std::nullopt;
  if (std::filesystem::is_directory(f.model)) {
    const store::Store s = store::Store::open(f.model);
    return ModelRecords{s.layout().record_bytes, s.layout().n_moe_layers, s.layout().n_expert, f.model};
  }
  const gguf::File file = gguf::File::open(f.model);
  const store::StorePlan plan = store::plan_store(file);
  return ModelRecords{plan.layout.record_bytes, plan.layout.n_moe_layers, plan.layout.n_expert, f.model};
}

struct Size {
  int per_layer = 0;  // slots per layer (the sweep's x), or 0 when given as a total
  uint64_t total = 0;
};

struct Row {
  std::string policy;
  Size size;
  stream::ReplayResult r;
  double bytes_per_token = NAN, tps = NAN;
};

stream::ReplayOptions base_options(const ReplayFlags& f) {
  stream::ReplayOptions o;
  o.lookahead = f.lookahead;
  o.prefill_chunk = f.batch;
  o.order = f.order == "trace" ? stream::AccessOrder::kTrace : stream::AccessOrder::kEngine;
  o.prefill = f.prefill == "bypass" ? stream::PrefillMode::kBypass
              : f.prefill == "skip" ? stream::PrefillMode::kSkip
                                    : stream::PrefillMode::kCached;
  o.guess = f.guess == "oracle" ? stream::GuessKind::kOracle : stream::GuessKind::kPreviousToken;
  o.policy_options.lfu_aging_period = f.lfu_period;
  o.policy_options.crf_half_life_tokens = f.crf_half_life;
  o.policy_options.gate_window_tokens = f.gate_window;
  o.policy_options.slru_protected_percent = f.slru_percent;
  o.ram_tier = f.ram_tier == "exclusive" ? stream::RamTier::kExclusive : stream::RamTier::kInclusive;
  return o;
}

// The device tier's slots: --gpu-slots, or --gpu-cache over the record size; 0 without a device tier.
uint64_t device_tier_slots(const ReplayFlags& f, const std::optional<ModelRecords>& rec) {
  if (f.gpu_slots && !f.gpu_cache.empty())
    fail("give the device tier as --gpu-slots or --gpu-cache, not both");
  if (f.gpu_slots) {
    if (*f.gpu_slots == 0) fail("--gpu-slots 0: a device tier holds at least one layer's top-k");
    return *f.gpu_slots;
  }
  if (f.gpu_cache.empty()) return 0;
  if (!rec) fail("--gpu-cache needs the record size: -m MODEL (a GGUF or a store) or --record-bytes");
  const uint64_t slots = stream::parse_byte_size(f.gpu_cache, "--gpu-cache") / rec->record_bytes;
  if (slots == 0)
    fail("--gpu-cache {} holds no record of {}", f.gpu_cache, stream::format_bytes(rec->record_bytes));
  return slots;
}

Row run_one(const stream::RoutingTrace& t, const ReplayFlags& f, const std::string& policy, const Size& size,
            const std::optional<ModelRecords>& rec, uint64_t device_slots) {
  stream::ReplayOptions o = base_options(f);
  o.belady = policy == "belady";
  if (!o.belady) o.policy = stream::parse_policy(policy);
  o.policy_options.top_k = t.k;
  if (rec) o.n_expert = rec->n_expert;
  if (f.layout == "per-layer") {
    o.layer_slots = f.split == "learned" ? stream::learned_layer_split(t, size.per_layer)
                                         : std::vector<int>(static_cast<size_t>(t.n_layers), size.per_layer);
  } else {
    o.slots = size.total;
  }
  o.device_slots = device_slots;
  Row row{policy, size, stream::replay_trace(t, o)};
  if (rec && row.r.decode_tokens > 0) {
    row.bytes_per_token = row.r.reads_per_token() * static_cast<double>(rec->record_bytes);
    row.tps = row.bytes_per_token > 0 ? f.disk_gbps * 1e9 / row.bytes_per_token : INFINITY;
  }
  return row;
}

nlohmann::json row_json(const Row& row, const ModelRecords* rec, bool per_layer) {
  nlohmann::json j;
  j["policy"] = row.policy;
  if (row.size.per_layer > 0) j["slots_per_layer"] = row.size.per_layer;
  j["slots"] = row.r.slots;
  if (rec) j["budget_bytes"] = row.r.slots * rec->record_bytes;
  j["hit_rate"] = row.r.hit_rate();
  const auto rate = [](const stream::LayerCounters& c) {
    return c.accesses ? static_cast<double>(c.hits) / static_cast<double>(c.accesses) : 0.0;
  };
  j["all_rows_hit_rate"] = rate(row.r.total);
  j["accesses"] = row.r.total.accesses;
  j["hits"] = row.r.total.hits;
  j["misses"] = row.r.total.misses;
  j["reads"] = row.r.total.reads;
  j["decode_accesses"] = row.r.decode.accesses;
  j["decode_hits"] = row.r.decode.hits;
  j["decode_tokens"] = row.r.decode_tokens;
  j["reads_per_token"] = row.r.reads_per_token();
  j["bytes_per_token"] =
      std::isfinite(row.bytes_per_token) ? nlohmann::json(row.bytes_per_token) : nlohmann::json();
  j["predicted_decode_tps"] = std::isfinite(row.tps) ? nlohmann::json(row.tps) : nlohmann::json();
  if (row.r.device_slots > 0) {
    j["device_slots"] = row.r.device_slots;
    if (rec) j["device_budget_bytes"] = row.r.device_slots * rec->record_bytes;
    j["device_hit_rate"] = row.r.device_hit_rate();
    j["device_accesses"] = row.r.device_total.accesses;
    j["device_hits"] = row.r.device_total.hits;
    j["copies"] = row.r.device_total.reads;
    j["copies_per_token"] = row.r.copies_per_token();
  }
  if (row.r.total.prefetch_issued > 0) {
    j["prefetch_issued"] = row.r.total.prefetch_issued;
    j["prefetch_hits"] = row.r.total.prefetch_hits;
  }
  if (per_layer) {
    nlohmann::json layers = nlohmann::json::array();
    for (size_t l = 0; l < row.r.layers.size(); ++l)
      layers.push_back(row.r.layer_hit_rate(static_cast<int>(l)));
    j["layer_hit_rates"] = layers;
  }
  return j;
}

std::string cell(const Row& row) {
  std::string s = fmt::format("{:5.1f} %", 100 * row.r.hit_rate());
  if (std::isfinite(row.tps)) s += fmt::format(" {:6.2f}", row.tps);
  return s;
}

void replay(const ReplayFlags& f) {
  const stream::RoutingTrace t = stream::read_routing_trace(f.trace);
  const std::optional<ModelRecords> rec = model_records(f);
  if (rec && rec->n_layers > 0 && (rec->n_layers != t.n_layers || rec->n_expert < t.n_expert))
    fmt::print(stderr,
               "warning: {} has {} MoE layers of {} experts, the trace {} of {}: is it the same model?\n",
               rec->from, rec->n_layers, rec->n_expert, t.n_layers, t.n_expert);
  if (f.layout != "per-layer" && f.split != "even")
    fail("--split learned divides per-layer caches: add --layout per-layer");
  const uint64_t device_slots = device_tier_slots(f, rec);
  if (device_slots > 0) {
    if (f.layout == "per-layer")
      fail("a device tier (--gpu-slots, --gpu-cache) sits above the shared cache: drop --layout per-layer");
    if (!f.sweep.empty() || f.sweep_default)
      fail("a device tier (--gpu-slots, --gpu-cache) replays one budget: drop --sweep");
  } else if (f.ram_tier != "inclusive") {
    fail("--ram-tier {} is the RAM tier under a device tier: add --gpu-slots or --gpu-cache", f.ram_tier);
  }

  const std::vector<std::string> policies = comma_items(f.policies);
  for (const std::string& p : policies)
    if (p != "belady") stream::parse_policy(p);  // a clear error before any work

  const int L = t.n_layers;
  if (f.guess_quality) {
    fmt::print(
        "read-ahead guesses on the decode rows (precision: guessed ids used; recall: used ids guessed):\n");
    const std::pair<const char*, stream::GuessRule> rules[] = {
        {"previous token, same layer", stream::GuessRule::kPreviousToken},
        {"previous 4 tokens, same layer", stream::GuessRule::kPreviousTokens4},
        {"same token, previous layer's ids", stream::GuessRule::kPreviousLayerSameIds}};
    for (const auto& [what, rule] : rules) {
      const stream::GuessQuality q = stream::guess_quality(t, rule);
      fmt::print("  {:<34} precision {:5.1f} %  recall {:5.1f} %  ({:.1f} ids guessed per row)\n", what,
                 100 * q.precision, 100 * q.recall,
                 q.used ? static_cast<double>(q.guessed) / (static_cast<double>(q.used) / t.k) : 0.0);
    }
    if (f.sweep.empty() && !f.sweep_default && !f.slots && !f.slots_per_layer && f.expert_cache.empty())
      return;
  }

  std::vector<Size> sizes;
  if (!f.sweep.empty() || f.sweep_default) {
    const std::vector<int> per = f.sweep.empty() ? std::vector<int>{16, 32, 48, 64, 96, 128} : f.sweep;
    for (int s : per) sizes.push_back({s, static_cast<uint64_t>(s) * static_cast<uint64_t>(L)});
  } else if (f.slots_per_layer) {
    sizes.push_back(
        {*f.slots_per_layer, static_cast<uint64_t>(*f.slots_per_layer) * static_cast<uint64_t>(L)});
  } else if (f.slots) {
    if (f.layout == "per-layer") fail("--layout per-layer takes --slots-per-layer, not --slots");
    sizes.push_back({0, *f.slots});
  } else if (!f.expert_cache.empty()) {
    if (!rec) fail("--expert-cache needs the record size: -m MODEL (a GGUF or a store) or --record-bytes");
    if (f.layout == "per-layer") fail("--layout per-layer takes --slots-per-layer, not --expert-cache");
    const uint64_t bytes = stream::parse_byte_size(f.expert_cache, "--expert-cache");
    sizes.push_back({0, bytes / rec->record_bytes});
  } else {
    fail(
        "give the budget: --slots N, --slots-per-layer N, --expert-cache SIZE (with -m or --record-bytes) or "
        "--sweep");
  }

  size_t prompt_rows = 0;
  for (size_t r = 0; r < t.rows(); ++r) prompt_rows += t.prompt_row(r);
  fmt::print("trace    {}: {} rows ({} prompt, {} decode), {} MoE layers, {} experts, top-{}{}\n", t.name,
             t.rows(), prompt_rows, t.rows() - prompt_rows, L, t.n_expert, t.k,
             t.warmup_rows_dropped ? fmt::format(", {} warm-up rows dropped", t.warmup_rows_dropped) : "");
  if (rec)
    fmt::print(
        "records  {} each (from {}); disk {:.2f} GB/s{}\n", stream::format_bytes(rec->record_bytes),
        rec->from, f.disk_gbps,
        f.disk_gbps == kDefaultDiskGbps ? " (this project's measured random-read rate; --disk-gbps)" : "");
  if (device_slots > 0)
    fmt::print("tiers    a device tier of {} slots{} above the cache given (the RAM tier, {}{})\n",
               device_slots,
               rec ? fmt::format(" = {}", stream::format_bytes(device_slots * rec->record_bytes)) : "",
               f.ram_tier, f.ram_tier == "exclusive" ? ": a study, the engine's RAM tier is inclusive" : "");
  fmt::print("replay   {} cache{}, {} order, prompt rows {}, lookahead {}{}, prefill chunk {}\n",
             f.layout == "per-layer" ? "one per layer" : "one shared",
             f.split == "learned" ? " (split learned from the trace)" : "", f.order, f.prefill, f.lookahead,
             f.lookahead ? " (guess: " + f.guess + ")" : "", f.batch);

  std::vector<Row> rows;
  for (const Size& size : sizes)
    for (const std::string& p : policies) rows.push_back(run_one(t, f, p, size, rec, device_slots));

  const bool table = device_slots == 0 && (sizes.size() > 1 || policies.size() > 1);
  if (device_slots > 0) {
    for (const Row& row : rows) {
      const stream::ReplayResult& r = row.r;
      const auto bytes = [&](double records) {
        return rec ? fmt::format(" = {}", stream::format_bytes(static_cast<uint64_t>(
                                              records * static_cast<double>(rec->record_bytes))))
                   : std::string();
      };
      fmt::print("{}:\n", row.policy);
      fmt::print(
          "  device tier {} slots: hit rate {:.1f} % of {} decode accesses, {:.1f} records copied up per "
          "decode token{}\n",
          r.device_slots, 100 * r.device_hit_rate(), r.device_decode.accesses, r.copies_per_token(),
          bytes(r.copies_per_token()));
      fmt::print(
          "  RAM tier {} slots: hit rate {:.1f} % of its {} decode accesses, {:.1f} records read from disk "
          "per decode token{}\n",
          r.slots, 100 * r.hit_rate(), r.decode.accesses, r.reads_per_token(), bytes(r.reads_per_token()));
      if (std::isfinite(row.tps))
        fmt::print("  decode {:.2f} tok/s at most, from the disk's read rate alone\n", row.tps);
    }
  } else if (table) {
    fmt::print("\nhit rate on decode rows{}:\n{:>11} {:>7} {:>10}", rec ? " and predicted decode tok/s" : "",
               "slots/layer", "slots", rec ? "budget" : "");
    for (const std::string& p : policies) fmt::print("  {:>15}", p);
    fmt::print("\n");
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Row& first = rows[i * policies.size()];
      fmt::print("{:>11} {:>7} {:>10}", sizes[i].per_layer ? std::to_string(sizes[i].per_layer) : "-",
                 first.r.slots, rec ? stream::format_bytes(first.r.slots * rec->record_bytes) : "");
      for (size_t p = 0; p < policies.size(); ++p)
        fmt::print("  {:>15}", cell(rows[i * policies.size() + p]));
      fmt::print("\n");
    }
  } else {
    const Row& row = rows.front();
    const stream::ReplayResult& r = row.r;
    fmt::print("cache    {} slots{}, {}\n", r.slots,
               rec ? fmt::format(" = {}", stream::format_bytes(r.slots * rec->record_bytes)) : "",
               row.policy);
    fmt::print("hit rate {:.1f} % of {} decode accesses ({:.1f} % of all {})\n", 100 * r.hit_rate(),
               r.decode.accesses,
               r.total.accesses
                   ? 100.0 * static_cast<double>(r.total.hits) / static_cast<double>(r.total.accesses)
                   : 0.0,
               r.total.accesses);
    fmt::print("reads    {:.1f} records per decode token{}\n", r.reads_per_token(),
               std::isfinite(row.bytes_per_token)
                   ? fmt::format(" = {}", stream::format_bytes(static_cast<uint64_t>(row.bytes_per_token)))
                   : "");
    if (std::isfinite(row.tps))
      fmt::print("decode   {:.2f} tok/s at most, from the disk's read rate alone\n", row.tps);
  }
  if (f.per_layer_table) {
    fmt::print("\nper-layer hit rate on decode rows:\n{:>6}", "layer");
    for (const std::string& p : policies) fmt::print(" {:>9}", p);
    fmt::print("\n");
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes.size() > 1) fmt::print("-- {} slots per layer\n", sizes[i].per_layer);
      for (int l = 0; l < L; ++l) {
        fmt::print("{:>6}", l);
        for (size_t p = 0; p < policies.size(); ++p)
          fmt::print(" {:>7.1f} %", 100 * rows[i * policies.size() + p].r.layer_hit_rate(l));
        fmt::print("\n");
      }
    }
  }

  if (!f.plot.empty()) {
    if (sizes.size() < 2 || sizes.front().per_layer == 0) fail("--plot draws a --sweep");
    std::vector<double> x;
    for (const Size& s : sizes) x.push_back(s.per_layer);
    PlotPanel hit{"hit rate on decode rows (%)", {}},
        tps{fmt::format("predicted decode tok/s at {:.2f} GB/s", f.disk_gbps), {}};
    for (size_t p = 0; p < policies.size(); ++p) {
      PlotSeries h{policies[p], {}}, s{policies[p], {}};
      for (size_t i = 0; i < sizes.size(); ++i) {
        const Row& row = rows[i * policies.size() + p];
        h.y.push_back(100 * row.r.hit_rate());
        s.y.push_back(row.tps);
      }
      hit.series.push_back(h);
      tps.series.push_back(s);
    }
    std::vector<PlotPanel> panels{hit};
    if (rec) panels.push_back(tps);
    const std::string svg = svg_line_chart(std::filesystem::path(t.name).filename().string(),
                                           f.layout == "per-layer" ? "slots per layer (one cache per layer)"
                                                                   : "slots per layer (one shared cache)",
                                           x, panels);
    AtomicFile out(f.plot);
    out.write(svg.data(), svg.size());
    out.commit();
    fmt::print("plot     {}\n", f.plot);
  }

  if (f.json) {
    nlohmann::json j = row_json(rows.front(), rec ? &*rec : nullptr, f.per_layer_table);
    j["trace"] = t.name;
    j["layers"] = L;
    j["experts"] = t.n_expert;
    j["top_k"] = t.k;
    if (rec) j["record_bytes"] = rec->record_bytes;
    j["disk_gbps"] = f.disk_gbps;
    j["lookahead"] = f.lookahead;
    j["layout"] = f.layout;
    j["order"] = f.order;
    j["prefill"] = f.prefill;
    if (rows.size() > 1) {
      nlohmann::json all = nlohmann::json::array();
      for (const Row& row : rows) all.push_back(row_json(row, rec ? &*rec : nullptr, f.per_layer_table));
      j["results"] = all;
    }
    fmt::print("{}\n", j.dump());
  }
}

}  // namespace

void register_replay(CLI::App& app) {
  auto f = std::make_shared<ReplayFlags>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "replay a routing trace through the expert cache: hit rate, bytes per token, decode speed by budget");
  cmd->add_option("trace", f->trace,
                  "routing trace: llama-moe-trace CSV (or --record-routing's), or a vLLM route log")
      ->required();
  cmd->add_option("-m,--model", f->model,
                  "the model's GGUF or expert store, for the record size (its header only)");
  cmd->add_option("--record-bytes", f->record_bytes, "the record size instead of -m");
  cmd->add_option("--expert-cache", f->expert_cache, "budget, e.g. 2G (needs the record size)");
  cmd->add_option("--slots", f->slots, "budget in slots, shared by every layer");
  cmd->add_option("--slots-per-layer", f->slots_per_layer, "budget in slots per MoE layer");
  cmd->add_option("--gpu-slots", f->gpu_slots,
                  "a device tier of this many slots above the cache given, which is then the RAM tier");
  cmd->add_option("--gpu-cache", f->gpu_cache, "the device tier as a size, e.g. 4G (needs the record size)");
  cmd->add_option(
         "--ram-tier", f->ram_tier,
         "under a device tier: inclusive (the engine's) or exclusive (a study: copied up leaves RAM, "
         "evicted from the device goes back down)")
      ->check(CLI::IsMember({"inclusive", "exclusive"}))
      ->capture_default_str();
  CLI::Option* sweep =
      cmd->add_option("--sweep", f->sweep, "slots per layer to sweep (no list: 16,32,48,64,96,128)")
          ->delimiter(',')
          ->expected(0, 64);
  cmd->add_option("--cache-policy", f->policies,
                  "policy, or several comma-separated: adaptive, lru, lfu, crf, gate-lru, slru, belady "
                  "(offline optimum)")
      ->capture_default_str();
  cmd->add_option("--layout", f->layout,
                  "shared: one cache for all layers (the engine's); per-layer: one cache each")
      ->check(CLI::IsMember({"shared", "per-layer"}))
      ->capture_default_str();
  cmd->add_option("--split", f->split, "per-layer sizes: even, or learned from the trace's reuse")
      ->check(CLI::IsMember({"even", "learned"}))
      ->capture_default_str();
  cmd->add_option("--order", f->order,
                  "engine: as diskformer acquires (ascending, per batch); trace: the router's order")
      ->check(CLI::IsMember({"engine", "trace"}))
      ->capture_default_str();
  cmd->add_option("--prefill", f->prefill, "prompt rows: cached, bypass (read past the cache) or skip")
      ->check(CLI::IsMember({"cached", "bypass", "skip"}))
      ->capture_default_str();
  cmd->add_option("--lookahead", f->lookahead, "MoE layers guessed and read ahead (shared layout only)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  cmd->add_option("--guess", f->guess,
                  "read-ahead guess: previous-token (same layer) or oracle (the real ids)")
      ->check(CLI::IsMember({"previous-token", "oracle"}))
      ->capture_default_str();
  cmd->add_option("-b,--batch-size", f->batch, "prefill chunk, as run -b")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--disk-gbps", f->disk_gbps,
                  "the disk's random-read rate in GB/s (bench/scripts/disk_ceiling.sh)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--lfu-period", f->lfu_period, "lfu: demand accesses between halvings (0: the slot count)");
  cmd->add_option("--crf-half-life", f->crf_half_life, "crf: half-life in tokens")->capture_default_str();
  cmd->add_option("--gate-window", f->gate_window, "gate-lru: reuse window in tokens")->capture_default_str();
  cmd->add_option("--slru-protected", f->slru_percent, "slru: protected share of the slots, percent")
      ->capture_default_str();
  cmd->add_option("--plot", f->plot, "with --sweep: write the curves to this SVG file");
  cmd->add_flag("--per-layer-table", f->per_layer_table, "print each layer's hit rate too");
  cmd->add_flag("--guess-quality", f->guess_quality,
                "judge read-ahead guesses the trace allows (precision, recall)");
  cmd->add_flag("--json", f->json, "end with one JSON object on the last line");
  cmd->callback([f, sweep] {
    // A bare --sweep leaves CLI11's placeholder 0 behind.
    std::erase(f->sweep, 0);
    f->sweep_default = sweep->count() > 0 && f->sweep.empty();
    replay(*f);
  });
}

}  // namespace df::cli

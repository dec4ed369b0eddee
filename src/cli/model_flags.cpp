#include "cli/model_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>

#include "backend/backend_factory.h"
#include "stream/byte_size.h"
#include "stream/eviction_policy.h"
#include "util/comma_list.h"
#include "util/cpu_limits.h"
#include "util/error.h"

namespace df::cli {

void ModelFlags::add(CLI::App* app) {
  app->add_option("-m,--model", model,
                  "model: a GGUF file (ingested into an expert store on first use) or a store");
  app->add_option(
      "--hf-repo", hf_repo,
      "-hf ORG/NAME[:QUANT], or a known model's name: pulled from the Hugging Face hub into a store "
      "on first use (`diskformer pull`), then run from there");
  hub.add(app);
  app->add_option("--store", store,
                  "where the expert store of a GGUF lives (default: $XDG_CACHE_HOME/diskformer)");
  app->add_flag("--resident", resident,
                "keep every expert in RAM, read from the GGUF (no store, no streaming)");
  app->add_option(
      "--expert-cache,--ram-cache", expert_cache,
      "expert cache budget in RAM, e.g. 512M, 2G (default: from free memory); under --device cuda "
      "the page-locked tier that feeds the GPU's");
  app->add_option(
      "--gpu-cache", gpu_cache,
      "with --device cuda: VRAM for expert records streamed from RAM, e.g. 4G (default: what is free "
      "after the trunk, 1 GiB or a tenth kept); with several devices the size of each, or one per device "
      "(4G,8G)");
  app->add_option("--tensor-split", tensor_split,
                  "(-ts) with several devices: each one's share of the layers (of every layer's experts with "
                  "--split-mode expert), e.g. 3,1 (default: in proportion to each GPU's free memory)");
  app->add_option("--split-mode", split_mode,
                  "(-sm) with several devices: layer (each device a range of layers, its experts streamed "
                  "or resident) or expert (the trunk on the first device, every layer's experts spread over "
                  "all of them; needs --resident)")
      ->check(CLI::IsMember({"layer", "expert"}))
      ->capture_default_str();
  app->add_option("--io", io, "expert reads: direct (O_DIRECT) or buffered (page cache)")
      ->check(CLI::IsMember({"direct", "buffered"}))
      ->capture_default_str();
  const auto policies = stream::policy_names();
  app->add_option(
         "--cache-policy", cache_policy,
         fmt::format("expert cache eviction: {} (docs/PERF.md compares them)", fmt::join(policies, ", ")))
      ->check(CLI::IsMember(std::vector<std::string>(policies.begin(), policies.end())))
      ->capture_default_str();
  app->add_option("--record-routing", record_routing,
                  "write every token's chosen experts to FILE (llama.cpp llama-moe-trace CSV, for `replay`)");
  app->add_option("--lookahead", lookahead, "MoE layers whose experts are guessed and read ahead (0 = off)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  app->add_flag(
      "--cpu-misses", cpu_misses,
      "with --device cuda and a --gpu-cache tier: a decode step computes the experts missing from "
      "VRAM on the CPU from their RAM records (the GPU's bits) while the GPU does the others, instead "
      "of waiting for their copies");
  app->add_option(
         "--miss-copies", miss_copies,
         "with --cpu-misses: experts a MoE layer still copies up per step (guesses included), so that "
         "the link and the CPU share the misses")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app->add_option("--device,--devices", device,
                  fmt::format("where the model computes: {}; a list (cuda:0,cuda:1 or cuda:all) splits the "
                              "layers over the devices in contiguous ranges",
                              fmt::join(backend::device_names(), ", ")))
      ->capture_default_str();
  app->add_option("-t,--threads", threads, "CPU threads (default: one per CPU this process may use)");
  app->add_option("-c,--ctx-size", ctx,
                  "context size in tokens (default: the training context, at most 4096)");
  app->add_option("-b,--batch-size", batch,
                  "prompt tokens per forward pass (prefill chunk; default 64 on the CPU, 512 on a GPU)")
      ->check(CLI::PositiveNumber);
}

namespace {

// The items of a list flag; an empty one is an error naming the flag.
std::vector<std::string> list_items(const std::string& list, const char* flag) {
  std::vector<std::string> out = comma_items(list);
  for (const std::string& item : out)
    if (item.empty()) fail("{} {}: an empty item in the list", flag, list);
  return out;
}

double parse_share(const std::string& s) {
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !(v >= 0) || !std::isfinite(v))
    fail("--tensor-split: '{}' is not a non-negative number", s);
  return v;
}

}  // namespace

bool ModelFlags::names_cuda() const { return device.find("cuda") != std::string::npos; }

ModelSourceOptions ModelFlags::source() const {
  ModelSourceOptions o;
  o.path = model;
  o.store_dir = store;
  o.resident = resident;
  if (!expert_cache.empty()) o.expert_cache_bytes = stream::parse_byte_size(expert_cache, "--expert-cache");
  if (!gpu_cache.empty()) {
    const auto sizes = list_items(gpu_cache, "--gpu-cache");
    if (sizes.size() == 1)
      o.gpu_cache_bytes = stream::parse_byte_size(gpu_cache, "--gpu-cache");
    else
      for (const auto& size : sizes)
        o.gpu_cache_per_device.push_back(stream::parse_byte_size(size, "--gpu-cache"));
  }
  if (!tensor_split.empty())
    for (const auto& share : list_items(tensor_split, "--tensor-split"))
      o.tensor_split.push_back(parse_share(share));
  o.io = io;
  o.cache_policy = cache_policy;
  o.n_threads = threads;
  o.device = device;
  o.split_mode = split_mode;
  o.prompt_snapshot = prompt_snapshot;
  o.lookahead = lookahead;
  o.cpu_misses = cpu_misses;
  o.miss_copies = miss_copies;
  o.n_ctx = ctx;
  // A GPU reads each expert's weights once per chunk and runs its products on tensor cores, so it wants long
  // chunks (llama.cpp's default micro-batch is 512); the CPU's products gain little past 64 rows, and a
  // short chunk keeps the streaming cache's pinned waves small.
  constexpr int kCpuPrefillChunk = 64, kGpuPrefillChunk = 512;
  o.prefill_chunk = batch > 0 ? batch : names_cuda() ? kGpuPrefillChunk : kCpuPrefillChunk;
  o.n_sequences = n_sequences;
  o.record_routing = record_routing;
  return o;
}

OpenedModel open_from_flags(const ModelFlags& flags, int n_ctx) {
  if (flags.model.empty() == flags.hf_repo.empty())
    fail("name the model once: -m FILE.gguf, -m STORE_DIR or -hf ORG/NAME[:QUANT]");
  if (!flags.hf_repo.empty() && (flags.resident || !flags.store.empty()))
    fail(
        "-hf runs the model from its expert store: --resident and --store need a GGUF given with -m "
        "(`diskformer "
        "pull --keep-gguf` keeps the file)");
  if (flags.resident && (!flags.expert_cache.empty() || !flags.store.empty() || !flags.gpu_cache.empty()))
    fail(
        "--resident keeps every expert in the device's memory: it cannot be combined with --expert-cache, "
        "--gpu-cache or --store");
  if (!flags.gpu_cache.empty() && !flags.names_cuda())
    fail(
        "--gpu-cache {} is the GPU's tier of the expert cache: it needs --device cuda (the CPU uses "
        "--expert-cache)",
        flags.gpu_cache);
  if (flags.cpu_misses && (!flags.names_cuda() || flags.resident))
    fail(
        "--cpu-misses computes on the CPU the experts a GPU's tier of the expert cache misses: it needs "
        "--device cuda without --resident");
  if (flags.threads < 0)
    fail("-t {}: the thread count must be positive (or 0 for one per usable CPU)", flags.threads);
  if (flags.threads > 0) {
    const CpuLimits cpus = read_cpu_limits();
    if (flags.threads > cpus.usable())
      fmt::print(
          stderr,
          "warning: -t {} is more than the {} CPU{} this process may use ({}): the extra threads only take "
          "turns and slow every step down\n",
          flags.threads, cpus.usable(), cpus.usable() == 1 ? "" : "s", cpus.describe());
  }
  ModelSourceOptions options = flags.source();
  if (!flags.hf_repo.empty()) {
    PullProgress progress;
    hub::PullOptions po = pull_options(flags.hub, progress);
    po.wait_for_lock = true;  // two runs of a new model: the second waits for the first one's pull
    options.path = hub::resolve_hf(flags.hf_repo, po);
  }
  if (n_ctx > 0) options.n_ctx = n_ctx;
  OpenedModel m = open_model(options);
  fmt::print(stderr, "{}\n", m.cache_description);
  if (m.cache)
    fmt::print(stderr, "expert cache: {}\n", m.cache->describe());  // what runs: policy, reader, I/O
  return m;
}

void print_prompt_ids(std::span<const int32_t> ids) {
  fmt::print(stderr, "prompt: {} tokens: {}\n", ids.size(), fmt::join(ids, " "));
}

std::unique_ptr<Session> make_session(OpenedModel& m, int n_ctx) {
  auto s = std::make_unique<Session>(*m.model, n_ctx, m.prefill_chunk);
  s->on_step = [&m](uint64_t tokens, uint64_t ns) { m.on_step(tokens, ns); };
  s->on_failure = [&m] { m.on_failure(); };
  if (m.prompt_snapshot) s->keep_prompt_snapshot();  // the memory plan counted it
  if (m.routing)
    s->on_prefill = [rec = m.routing.get()](int prompt_tokens) { rec->begin_prompt(prompt_tokens); };
  return s;
}

void SamplingFlags::add(CLI::App* app) {
  app->add_option("--temp", params.temperature, "temperature (0 = greedy)")->capture_default_str();
  app->add_option("--top-k", params.top_k, "top-k (0 = off)")->capture_default_str();
  app->add_option("--top-p", params.top_p, "top-p (1 = off)")->capture_default_str();
  app->add_option("--min-p", params.min_p, "min-p (0 = off)")->capture_default_str();
  app->add_option("--repeat-penalty", params.repeat_penalty, "repetition penalty (1 = off)")
      ->capture_default_str();
  app->add_option("--repeat-last-n", params.repeat_last_n, "tokens the repetition penalty looks back")
      ->capture_default_str();
  app->add_option("-s,--seed", seed, "random seed (default: random)");
}

SamplingParams SamplingFlags::resolve() const {
  SamplingParams p = params;
  p.seed = seed ? *seed : (static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}());
  return p;
}

}  // namespace df::cli

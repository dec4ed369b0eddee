#pragma once
// Flags shared by run, chat and bench, named as llama.cpp names them, plus the streaming flags.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "cli/hub_flags.h"
#include "engine/model_source.h"
#include "engine/sampler.h"
#include "engine/session.h"

namespace df::cli {

struct ModelFlags {
  std::string model, store, expert_cache, io = "direct", cache_policy = "adaptive", device = "cpu";
  std::string gpu_cache;     // --gpu-cache SIZE[,SIZE...]: the device tier of the expert cache (per device)
  std::string tensor_split;  // --tensor-split A,B,...: each device's share of the layers (or experts)
  std::string split_mode = "layer";  // --split-mode layer|expert (-sm)
  std::string record_routing;        // --record-routing FILE
  std::string hf_repo;  // -hf REPO[:QUANT] (or a known model's name): pulled on first use (hub/pull.h)
  HubFlags hub;
  bool resident = false;
  int threads = 0;
  int ctx = 0;    // 0: min(training context, 4096), resolved by open_model (OpenedModel::n_ctx)
  int batch = 0;  // prefill chunk; 0: the device's default (kCpuPrefillChunk, kGpuPrefillChunk)
  int lookahead = 1;
  bool cpu_misses = false;
  int miss_copies = 1;
  bool prompt_snapshot = false;  // set by chat: Session::keep_prompt_snapshot() holds a second state
  int n_sequences = 1;           // set by serve (-np): sessions side by side, each in the memory plan
  void add(CLI::App* app);
  ModelSourceOptions source() const;
  // Whether --device names a CUDA device (alone or in a list).
  bool names_cuda() const;
  const std::string& display_name() const { return hf_repo.empty() ? model : hf_repo; }
};

// Opens the model named by the flags (-m, or -hf pulled first when it is not here yet), for a context of
// n_ctx tokens (0: -c), and prints what the expert cache got (stderr); warns when -t asks for more threads
// than the CPUs this process may use.
OpenedModel open_from_flags(const ModelFlags& flags, int n_ctx = 0);
// --verbose-prompt (llama.cpp's flag): the prompt's token ids, as the model will see them, on stderr.
void print_prompt_ids(std::span<const int32_t> ids);
// A session wired to the model's expert cache (telemetry per step, clean-up after a failed step), keeping a
// prompt snapshot when the model was opened for one (ModelSourceOptions::prompt_snapshot).
std::unique_ptr<Session> make_session(OpenedModel& m, int n_ctx);

struct SamplingFlags {
  SamplingParams params;
  std::optional<uint64_t> seed;
  void add(CLI::App* app);
  SamplingParams resolve() const;  // fills a random seed when none was given
};

}  // namespace df::cli

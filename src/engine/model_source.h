#pragma once
// Opens what the user names with -m, as llama.cpp users expect: a GGUF file (ingested into an expert store on
// first use, then run from the store with its routed experts streamed from disk into a budgeted cache) or an
// expert store directory. --resident instead loads every expert of a GGUF into RAM (no store, no streaming).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/routing_recorder.h"
#include "gguf/gguf.h"
#include "models/model.h"
#include "store/store.h"
#include "stream/cache_budget.h"
#include "stream/expert_cache.h"
#include "stream/streaming_expert_provider.h"
#include "stream/tiered_expert_provider.h"
#include "tokenizer/tokenizer.h"

namespace df {

struct ModelSourceOptions {
  std::string path;       // -m: FILE.gguf or a store directory
  std::string store_dir;  // --store: where the store of a .gguf lives (default: the cache directory)
  bool resident = false;  // --resident: every expert in RAM, read from the GGUF
  std::optional<uint64_t> expert_cache_bytes;  // --expert-cache / --ram-cache; absent: automatic
  // --gpu-cache: the device tier of the expert cache (record slots in the backend's memory, fed from the RAM
  // tier). Absent: none on the CPU, and on a GPU what its free memory holds after the trunk (1 GiB or a tenth
  // kept free). On the CPU backend the tier is host memory: tests use it to run the tier chain without a GPU
  // (a CPU listed beside a GPU gets none: it reads the RAM tier directly).
  std::optional<uint64_t> gpu_cache_bytes;
  // --gpu-cache A,B,...: one size per device of a layer split instead (as many as --device names).
  std::vector<uint64_t> gpu_cache_per_device;
  std::string io = "direct";         // --io direct|buffered
  std::string cache_policy = "adaptive";  // --cache-policy: a name of stream::policy_names()
  // --device: what backend::make_backend builds; a list ("cuda:0,cuda:1", "cuda:all") splits the layers over
  // the devices in contiguous ranges (models/layer_split.h), each with its own tier of the expert cache
  // above one shared RAM tier.
  std::string device = "cpu";
  // --tensor-split: each device's share of the layers (as many as devices); empty: in proportion to each
  // device's free memory when all of them report it, else equal.
  std::vector<double> tensor_split;
  // --split-mode: how a device list shares the model. "layer" (the default): contiguous ranges of layers.
  // "expert": the trunk on the first device and every MoE layer's experts spread over all of them in
  // contiguous ranges sized by the shares (models/expert_parallel.h); it needs --resident.
  std::string split_mode = "layer";
  bool prompt_snapshot = false;  // the session keeps a prompt snapshot (chat): one more state in the plan
  int n_sequences = 1;  // sessions that will run side by side (serve -np): each one's state is in the plan
  int n_threads = 0;    // -t; <= 0: one per CPU this process may use (util/cpu_limits.h)
  int lookahead = 1;    // --lookahead
  // --cpu-misses: a device tier leaves a decode step's missing experts in RAM for the backend to compute on
  // the host (to the GPU's bits), copying up at most miss_copies a layer (--miss-copies).
  bool cpu_misses = false;
  int miss_copies = 1;
  // -c: the context the sessions will use; 0: the training context, at most 4096. Checked against the
  // training context and the memory there is, and its state is part of the automatic budget's reserve.
  int n_ctx = 0;
  int prefill_chunk = 64;      // wanted prefill chunk; the cache may need it smaller
  std::string record_routing;  // --record-routing: write every forward's routing to this CSV file
  std::function<void(const std::string&)> notice;  // one-line notes for the user (stderr by default)
  stream::FaultPlan faults;  // tests only: read faults injected below the expert cache of a store
  std::optional<stream::MemorySnapshot> memory;  // tests: this instead of /proc/meminfo and the cgroup
};

struct OpenedModel {
  // Destruction runs bottom-up: the model (and its expert provider) goes before the cache it reads.
  std::unique_ptr<RoutingRecorder> routing;  // --record-routing; the model reports to it
  std::optional<store::Store> store;
  std::unique_ptr<stream::ExpertCache> cache;     // null when resident; the RAM tier under a device tier
  stream::TieredExpertProvider* tiers = nullptr;  // the model's provider when it has a device tier
  // Each device's tier (per backend, in layer order; null for a device without one: tiers is the first that
  // has one), and the providers that read the RAM tier directly.
  std::vector<stream::TieredExpertProvider*> device_tiers;
  std::vector<stream::StreamingExpertProvider*> ram_readers;
  std::unique_ptr<gguf::File> file;           // the trunk's GGUF: the source, or the store's dense.bin
  std::shared_ptr<backend::Backend> backend;  // what the model computes on (--device; the first of a split)
  std::vector<std::shared_ptr<backend::Backend>> backends;  // every device of a layer split, in layer order
  std::vector<std::pair<int, int>> layer_ranges;            // each device's layers [first, end)
  std::vector<std::pair<int, int>>
      expert_ranges;  // --split-mode expert: each device's experts of every layer
  std::unique_ptr<models::Model> model;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::optional<std::string> chat_template;  // tokenizer.chat_template, if the file has one
  int prefill_chunk = 64;                    // the chunk to use: at most what the cache can hold at once
  int n_ctx = 0;                 // the context the memory was planned for (options.n_ctx resolved)
  bool prompt_snapshot = false;  // options.prompt_snapshot: the plan counted one, sessions keep one
  int n_threads = 0;             // the compute threads (options.n_threads resolved)
  uint64_t reserve_bytes = 0;    // memory planned for everything but the expert cache (engine/memory_plan.h)
  uint64_t trunk_bytes = 0;      // resident tensors (the dense part of the model)
  uint64_t expert_bytes = 0;     // all routed experts (on disk when streaming)
  std::string cache_description;

  // The device tiers' telemetry as one (stream::merge_disjoint_layers), its reset, the tiers described
  // ("cuda:0: 8 slots x ...; cuda:1: ..."), and their slots' bytes in all.
  stream::TelemetrySnapshot device_telemetry() const;
  void reset_device_telemetry();
  std::string describe_device_tiers() const;
  uint64_t device_tier_bytes() const;
  // The most rows a batch may hold for batch-independent results on every device (0: any number).
  int64_t batch_invariant_rows() const;
  // Hooks for a Session: each step's token count and time (telemetry), and clean-up after a failed step.
  void on_step(uint64_t tokens, uint64_t ns);
  void on_failure();
  // --record-routing: writes the trace out (df::Error when that fails) and says where on stderr.
  void finish_recording();
};

// Checks the context and the memory it needs (engine/memory_plan.h) before the trunk, the state or the expert
// cache is allocated; df::Error names what is needed and what there is.
OpenedModel open_model(const ModelSourceOptions& options);

}  // namespace df

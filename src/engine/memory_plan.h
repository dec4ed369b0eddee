#pragma once
// What a run needs in memory beside the expert cache, computed from the model's sizes, the context, the
// prefill chunk and the threads (nothing is allocated to find out), set against what MemAvailable and the
// cgroup limit leave. A context the model was not trained for, or one that memory cannot hold, is refused
// here, before the trunk, the state or the cache exist; the automatic expert-cache budget gets the rest.
#include <cstdint>
#include <optional>
#include <string>

#include "stream/cache_budget.h"

namespace df::gguf {
class File;
}

namespace df {

struct MemoryPlanInput {
  uint64_t trunk_bytes = 0;    // resident tensors
  uint64_t state_bytes = 0;    // models::state_bytes(n_ctx, n_batch, n_threads): KV, recurrent state, scratch
  uint64_t session_bytes = 0;  // logits, sampler candidates, token history of the session
  uint64_t metadata_bytes = 0;  // the GGUF's header: the tokenizer and chat template are built from it
  uint64_t stack_bytes = 0;     // the stack each thread maps
  int n_ctx = 0;
  int n_ctx_train = 0;  // 0: unknown (not checked)
  int n_threads = 1;    // compute threads (resolved, > 0)
  // The experts: all in RAM (resident), or a cache of records streamed from the store.
  bool resident = false;
  uint64_t resident_expert_bytes = 0;
  std::optional<uint64_t> expert_cache_bytes;  // --expert-cache; absent: automatic
  uint64_t record_bytes = 0, total_records = 0, min_records = 0;
};

// The memory kept for everything but the expert cache.
struct MemoryReserve {
  uint64_t trunk = 0, state = 0, session = 0, stacks = 0, fixed = 0;
  uint64_t total() const { return trunk + state + session + stacks + fixed; }
  std::string describe() const;  // "trunk 1.2 GiB + state 98 MiB + ..."
};

// Threads beside the compute pool: the expert reader (io_uring: 1, pread: up to 4) and the main thread.
inline constexpr int kOtherThreads = 5;
// What no size of the model accounts for: the binary and its libraries, the allocator's arenas and slack,
// the reader's queues. On lfm2-24b the peak RSS beyond trunk, state and cache was 31-38 MiB in all, the
// tokenizer and the threads' stacks included (docs/PERF.md); this, the metadata factor and the full stacks
// keep ~130 MiB for it.
inline constexpr uint64_t kFixedOverhead = uint64_t{64} << 20;
// The tokenizer's vocabulary, merges and lookup tables take a few times the metadata they are built from.
inline constexpr uint64_t kMetadataFactor = 4;

MemoryReserve memory_reserve(const MemoryPlanInput& in);

struct MemoryPlan {
  MemoryReserve reserve;
  stream::BudgetChoice cache;  // slots = 0 when resident
  std::string description;     // one line for the user
  std::string warning;         // non-empty: an explicit --expert-cache that memory does not hold
};

// Throws df::Error, saying what is needed and what there is, when n_ctx exceeds the training context, or the
// reserve and the least cache (or the resident experts; none when record_bytes is 0) exceed what is usable.
// Returns the reserve.
MemoryReserve check_memory(const MemoryPlanInput& in, const stream::MemorySnapshot& memory);

// check_memory, then the expert cache's budget: the explicit one, or what is usable less the reserve.
MemoryPlan plan_memory(const MemoryPlanInput& in, const stream::MemorySnapshot& memory);

// The sizes of a model from its (trunk) GGUF, keys and tensor table only, for n_ctx positions, prefill chunks
// of n_batch tokens and n_threads threads, plus `snapshot_states` states that only hold a sequence (a chat's
// prompt snapshot: KV, recurrent state and attention scratch, no batch buffers). The expert fields are left
// for the caller.
MemoryPlanInput memory_plan_input(const gguf::File& trunk, int n_ctx, int n_batch, int n_threads,
                                  int snapshot_states = 0);

// The device tier's slots when --gpu-cache is not given: every record if they fit, else what `free_bytes` of
// device memory (after the trunk) holds, keeping 1 GiB or a tenth of it (whichever is more) for the state and
// scratch. A device named for several stages of a layer split (one card standing in for two) is shared: this
// tier takes its part of what is usable now, `sharers` being the automatic tiers still to be made there, this
// one included. Throws df::Error naming `device` when fewer than min_slots fit.
uint64_t automatic_device_slots(uint64_t free_bytes, uint64_t n_records, uint64_t record_bytes,
                                uint64_t min_slots, int sharers, const std::string& device);

}  // namespace df

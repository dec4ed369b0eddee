#pragma once
// How many expert slots the cache gets: from --expert-cache SIZE, or chosen from the memory this process may
// still use (MemAvailable and the cgroup limit) after the trunk and the KV cache have their share (the
// caller computes that reserve: engine/memory_plan.h).
#include <cstdint>
#include <optional>
#include <string>

namespace df::stream {

struct MemorySnapshot {
  uint64_t mem_available = 0;            // /proc/meminfo MemAvailable
  std::optional<uint64_t> cgroup_limit;  // the tightest memory.max / memory.limit_in_bytes; absent: unlimited
  uint64_t cgroup_usage = 0;             // memory.current / memory.usage_in_bytes of that cgroup
  // What this process can still take: MemAvailable, or less when the cgroup limit is nearer.
  uint64_t usable() const;
};

// Reads /proc/meminfo and the cgroup (v2, else v1) of this process under `root` ("/" normally; tests pass a
// fake tree with proc/meminfo, proc/self/cgroup and sys/fs/cgroup/...).
MemorySnapshot read_memory_snapshot(const std::string& root = "/");

struct BudgetRequest {
  std::optional<uint64_t> explicit_bytes;  // --expert-cache; absent: automatic
  uint64_t reserve_bytes = 0;              // trunk + KV cache + the rest of the runtime, from the caller
  std::string reserve_description;         // what reserve_bytes is made of, for the messages
  uint64_t record_bytes = 0;               // one expert record (store Layout::record_bytes)
  uint64_t total_records = 0;              // every record of the store: more slots than this are useless
  uint64_t min_records = 0;                // the top-k of one layer; more when prefill chunks pin a union
};

struct BudgetChoice {
  uint64_t slots = 0;
  uint64_t bytes = 0;  // slots * record_bytes: what the pool allocates
  bool automatic = false;
  std::string description;  // one line for the user: the chosen size and why
};

// Throws df::Error when the budget cannot hold min_records records, saying how much is needed.
BudgetChoice choose_expert_budget(const BudgetRequest& request, const MemorySnapshot& memory);

// The most tokens a prefill chunk may hold so that the union of its experts (at most min(n_expert,
// tokens * top_k) per layer) fits in `slots`; at least 1, at most `wanted`.
int max_prefill_chunk(uint64_t slots, int top_k, int n_expert, int wanted);

}  // namespace df::stream

#pragma once
// Which unpinned, non-guessed resident expert the cache gives up when it needs a slot. The cache owns the
// rules that come before any policy (free slots first, then guessed-but-unused ones; pinned and in-flight
// slots never); a policy only orders the plain candidates. Policies are fixed-capacity: nothing allocates
// after construction.
#include <cstdint>
#include <memory>
#include <string_view>

namespace df::stream {

enum class PolicyKind { kLru, kLfuAging };

// "lru" or "lfu" (also "lfu-aging"); throws df::Error naming --cache-policy otherwise.
PolicyKind parse_policy(std::string_view text);
const char* policy_name(PolicyKind kind);

// A predicate over slots that needs no allocation: allowed(ctx, slot).
struct SlotFilter {
  const void* ctx = nullptr;
  bool (*allowed)(const void* ctx, int slot) = nullptr;
  bool operator()(int slot) const { return allowed(ctx, slot); }
};

class EvictionPolicy {
 public:
  static constexpr int kNone = -1;
  virtual ~EvictionPolicy() = default;
  virtual const char* name() const = 0;
  // A demand access of `key` (MoE layer * n_expert + expert). The cache calls it while the key's slot, if
  // any, is not a candidate (it has just been pinned).
  virtual void on_demand(int key) = 0;
  // `slot`, holding `key`, may now be evicted: its last pin was released.
  virtual void add_candidate(int slot, int key) = 0;
  // `slot` is pinned again or leaves the cache (no-op when it is not a candidate).
  virtual void remove_candidate(int slot) = 0;
  // The candidate to evict next, or kNone. Does not remove it.
  virtual int victim() const = 0;
  // The best of the first `max_scan` candidates (in eviction order, approximately for a heap) that `allowed`
  // accepts, or kNone. For read-ahead, which must not push out what is needed before its guess.
  virtual int victim_if(const SlotFilter& allowed, int max_scan) const = 0;
  virtual uint64_t memory_bytes() const = 0;
};

struct PolicyOptions {
  // LFU with ageing: every `aging_period` demand accesses all frequencies halve, so experts that were popular
  // long ago give way to the ones in use now. 0: as many accesses as the cache has slots.
  uint64_t lfu_aging_period = 0;
};

std::unique_ptr<EvictionPolicy> make_policy(PolicyKind kind, int n_slots, int n_keys,
                                            const PolicyOptions& options = {});

}  // namespace df::stream

#pragma once
// Which unpinned, non-guessed resident expert the cache gives up when it needs a slot. The cache owns the
// rules that come before any policy (free slots first, then guessed-but-unused ones; pinned and in-flight
// slots never); a policy only orders the plain candidates. Policies are fixed-capacity: nothing allocates
// after construction.
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace df::stream {

// lru: least recently used. lfu: least frequently used with ageing. crf: combined recency and frequency (a
// decayed use count with a half-life, llama.cpp's CRF). gate-lru: LRU that admits an expert at the cold end
// unless it was used within a window before (a one-off use does not push out the working set). slru:
// segmented LRU, experts used again while cached are protected from one-off ones. adaptive: the order of lru
// or crf, whichever a shadow cache of each says would have hit more of the recent accesses.
enum class PolicyKind { kLru, kLfuAging, kCrf, kGateLru, kSlru, kAdaptive };

// A name of policy_names() (also "lfu-aging" for lfu); throws df::Error naming --cache-policy otherwise.
PolicyKind parse_policy(std::string_view text);
const char* policy_name(PolicyKind kind);
std::span<const char* const> policy_names();  // "lru", "lfu", "crf", "gate-lru", "slru", "adaptive"

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
  // `slot` starts holding `key` (a miss or a guess is read into it), before that access's on_demand();
  // a later add_candidate of the slot without another on_admit means the key was used again while cached.
  virtual void on_admit(int /*slot*/, int /*key*/) {}
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
  // CRF: a use counts half after this many tokens (llama.cpp's default).
  double crf_half_life_tokens = 128;
  // gate-lru: an expert missed again within this many tokens of its last use is admitted as recent.
  int gate_window_tokens = 32;
  // slru: the share of the slots the protected segment may hold.
  int slru_protected_percent = 25;
  // adaptive: the contenders' shadow hits are weighted over about this many demand accesses. 0: a default
  // from the slot count.
  double adaptive_window_accesses = 0;
  // The shape the token clocks of crf and gate-lru need: keys per MoE layer and the top-k (accesses of a
  // layer per token). The cache fills them in; 0: 1.
  int n_expert = 0;
  int top_k = 0;
};

std::unique_ptr<EvictionPolicy> make_policy(PolicyKind kind, int n_slots, int n_keys,
                                            const PolicyOptions& options = {});

}  // namespace df::stream

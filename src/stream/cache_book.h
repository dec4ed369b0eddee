#pragma once
// The expert cache's bookkeeping without memory, files or threads: which (MoE layer, expert) key each slot
// holds, pins, read states, the guess lists, the eviction policy and the hit/miss counters. ExpertCache
// wraps it with the slot memory, the reader and a mutex; `diskformer replay` drives the same object with a
// routing trace, so a replayed trace takes exactly the decisions the engine takes (stream/trace_replay.h).
//
// Victims, in order: free slots, guesses whose layer has passed without using them (wrong guesses), the
// policy's choice, then (demand only) guesses for layers still ahead, oldest first, and guesses still queued.
// Pinned and in-flight slots never. Nothing allocates after construction. Not thread-safe: the owner locks.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "stream/cache_telemetry.h"
#include "stream/eviction_policy.h"
#include "stream/slot_lists.h"

namespace df::stream {

struct CacheBookOptions {
  int n_layers = 0;
  int n_expert = 0;
  uint64_t n_slots = 0;
  uint64_t record_bytes = 0;  // only for messages
  PolicyKind policy = PolicyKind::kLru;
  PolicyOptions policy_options;
};

class CacheBook {
 public:
  enum class State : uint8_t { kEmpty, kQueued, kReading, kReady, kFailed };
  // pin(): only a read in flight could make room; wait for one to land, then call pin() again.
  static constexpr int kWaitForRead = -2;

  // Counts go to `telemetry` (accesses, hits, misses, the prefetch counters); the owner adds the read
  // counters.
  CacheBook(const CacheBookOptions& options, CacheTelemetry& telemetry);

  int n_expert() const { return n_expert_; }
  int n_layers() const { return n_layers_; }
  int n_slots() const { return static_cast<int>(slots_.size()); }
  int key_of(int layer, int expert) const { return layer * n_expert_ + expert; }
  const char* policy_name() const { return policy_->name(); }
  uint64_t memory_bytes() const;

  // Demand moved to `layer`: the unused guesses of the layer it left become the first victims, and those
  // not yet read are withdrawn. acquire() calls it once per call, before pinning.
  void enter_layer(int layer);
  // Pins one expert (an id twice is pinned twice): its slot, or kWaitForRead. A miss queues a demand read.
  // Throws df::Error when every slot is pinned.
  int pin(int layer, int expert);
  void unpin(int slot);
  // Every pin dropped, e.g. after a step failed half way.
  void unpin_all();
  // Guesses of a later layer into free slots, wrong guesses or the policy's victims that are not needed
  // before the guess; never evicts a pinned slot; drops what finds no slot. True when a read was queued.
  bool prefetch(int layer, std::span<const int32_t> ids);

  // A record that arrives without a read (copied down from a tier above): takes a free slot, a wrong guess
  // or the policy's victim and is ready at once, unpinned; no access or read is counted. False when the key
  // is already here or no slot may be taken (nothing pinned, queued or guessed is evicted for it).
  bool insert_ready(int layer, int expert);
  // An unpinned, ready slot gives its record up (it moved to a tier above) and becomes free.
  void drop(int slot);
  // Called with each key whose ready record leaves a slot (evicted for another), e.g. so that a tier below
  // can take it back. Not on drop().
  struct EvictListener {
    void* ctx = nullptr;
    void (*fn)(void* ctx, int key) = nullptr;
  };
  void set_evict_listener(EvictListener listener) { evict_listener_ = listener; }

  // The next read to start: a demand read, else (allow_guess) a guess; -1 when none is queued.
  int start_read(bool allow_guess, bool* guess);
  // A started read landed (ok) or failed; an unpinned slot becomes evictable.
  void finish_read(int slot, bool ok);
  bool reads_queued() const { return !lists_.empty(kDemandQueue) || !lists_.empty(kGuessQueue); }
  bool demand_queued() const { return !lists_.empty(kDemandQueue); }

  int slot_of(int key) const { return map_[static_cast<size_t>(key)]; }
  int key(int slot) const { return slots_[static_cast<size_t>(slot)].key; }
  int pins(int slot) const { return slots_[static_cast<size_t>(slot)].pins; }
  State state(int slot) const { return slots_[static_cast<size_t>(slot)].state; }

 private:
  enum List : int { kFree, kDemandQueue, kGuessQueue, kStaleGuesses, kPendingGuesses, kListCount };
  struct Slot {
    int32_t key = -1;
    int32_t pins = 0;
    State state = State::kEmpty;
    bool guessed = false;      // filled by a guess and not yet demanded
    uint64_t guess_epoch = 0;  // epoch_ when the guess was made
  };

  int demand_victim(int layer);
  int guess_victim(int layer);
  bool stale(const Slot& s) const;
  void evict(int slot);
  void assign(int slot, int key, bool guess);
  void park(int slot);  // an unpinned slot whose read has finished goes where it may be evicted from

  int n_layers_, n_expert_;
  uint64_t record_bytes_;
  CacheTelemetry& telemetry_;
  std::vector<int32_t> map_;  // key -> slot, -1 when not resident
  std::vector<Slot> slots_;
  SlotLists lists_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::vector<uint64_t> layer_done_epoch_;  // per layer: the epoch at which demand last moved past it
  int current_layer_ = -1;
  uint64_t epoch_ = 1;
  EvictListener evict_listener_;
};

}  // namespace df::stream

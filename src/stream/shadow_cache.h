#pragma once
// A cache of keys only, run beside the real one on the same demand accesses, to learn how well another
// policy would have kept them. It holds no data and reads nothing: a hit or a miss is all it answers. The
// real cache pins a layer's experts while they compute, so the shadow holds the last `held` keys it was
// asked for (a layer's top-k) out of its policy's reach as well. Fixed capacity: nothing allocates after
// construction.
#include <cstdint>
#include <memory>
#include <vector>

#include "stream/eviction_policy.h"

namespace df::stream {

class ShadowCache {
 public:
  ShadowCache(std::unique_ptr<EvictionPolicy> policy, int n_slots, int n_keys, int held);
  // A demand access of `key`; true when the shadow held it.
  bool access(int key);
  uint64_t memory_bytes() const;

 private:
  void hold(int slot);

  std::unique_ptr<EvictionPolicy> policy_;
  int n_slots_;
  int used_ = 0;
  std::vector<int> slot_of_key_;  // -1: not cached
  std::vector<int> key_of_slot_;
  std::vector<int> holds_;      // per slot: how many of the last `held` accesses it answered
  std::vector<int> held_ring_;  // the slots of the last accesses, oldest at held_next_ (-1: none yet)
  size_t held_next_ = 0;
};

}  // namespace df::stream

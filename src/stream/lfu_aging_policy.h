#pragma once
// Least frequently used with ageing and history: a demand count per expert (kept while the expert is not
// resident, so a popular expert that was pushed out comes back strong), halved every `aging_period` demand
// accesses. The candidate with the smallest count goes first; among equal counts the one released longest
// ago.
#include <cstdint>
#include <vector>

#include "stream/eviction_policy.h"

namespace df::stream {

class LfuAgingPolicy final : public EvictionPolicy {
 public:
  LfuAgingPolicy(int n_slots, int n_keys, uint64_t aging_period);
  const char* name() const override { return "lfu-aging"; }
  void on_demand(int key) override;
  void add_candidate(int slot, int key) override;
  void remove_candidate(int slot) override;
  int victim() const override { return heap_.empty() ? kNone : heap_.front(); }
  int victim_if(const SlotFilter& allowed, int max_scan) const override;
  uint64_t memory_bytes() const override;

  uint32_t count(int key) const { return counts_[static_cast<size_t>(key)]; }

 private:
  bool before(int a, int b) const;  // a is evicted before b
  void sift_up(size_t i);
  void sift_down(size_t i);
  void place(size_t i, int slot);

  uint64_t aging_period_;
  uint64_t accesses_ = 0;
  uint64_t tick_ = 0;
  std::vector<uint32_t> counts_;     // per key
  std::vector<int32_t> slot_key_;    // per slot, while a candidate
  std::vector<uint64_t> slot_tick_;  // per slot: when it became a candidate
  std::vector<int32_t> heap_pos_;    // per slot: index in heap_, or -1
  std::vector<int32_t> heap_;        // binary min-heap of candidate slots; capacity reserved up front
};

}  // namespace df::stream

#pragma once
// Least frequently used with ageing and history: a demand count per expert (kept while the expert is not
// resident, so a popular expert that was pushed out comes back strong), halved every `aging_period` demand
// accesses. The candidate with the smallest count goes first; among equal counts the one released longest
// ago.
#include <cstdint>
#include <vector>

#include "stream/heap_policy.h"

namespace df::stream {

class LfuAgingPolicy final : public HeapPolicy<LfuAgingPolicy> {
 public:
  LfuAgingPolicy(int n_slots, int n_keys, uint64_t aging_period);
  const char* name() const override { return "lfu-aging"; }
  void on_demand(int key) override;
  void add_candidate(int slot, int key) override;
  uint64_t memory_bytes() const override;

  uint32_t count(int key) const { return counts_[static_cast<size_t>(key)]; }
  bool before(int a, int b) const;  // slot a is evicted before slot b (the heap's order)

 private:
  uint64_t aging_period_;
  uint64_t accesses_ = 0;
  uint64_t tick_ = 0;
  std::vector<uint32_t> counts_;     // per key
  std::vector<int32_t> slot_key_;    // per slot, while a candidate
  std::vector<uint64_t> slot_tick_;  // per slot: when it became a candidate
};

}  // namespace df::stream

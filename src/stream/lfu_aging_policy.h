#pragma once
// Least frequently used with ageing and history: a demand count per expert (kept while the expert is not
// resident, so a popular expert that was pushed out comes back strong), halved every `aging_period` demand
// accesses. The candidate with the smallest count goes first; among equal counts the one released longest
// ago.
#include <cstdint>
#include <vector>

#include "stream/eviction_policy.h"
#include "stream/slot_heap.h"

namespace df::stream {

class LfuAgingPolicy final : public EvictionPolicy {
 public:
  LfuAgingPolicy(int n_slots, int n_keys, uint64_t aging_period);
  LfuAgingPolicy(const LfuAgingPolicy&) = delete;  // the heap's order points at this object
  LfuAgingPolicy& operator=(const LfuAgingPolicy&) = delete;
  const char* name() const override { return "lfu-aging"; }
  void on_demand(int key) override;
  void add_candidate(int slot, int key) override;
  void remove_candidate(int slot) override { heap_.remove(slot); }
  int victim() const override { return heap_.empty() ? kNone : heap_.top(); }
  int victim_if(const SlotFilter& allowed, int max_scan) const override {
    return heap_.best_of_first(allowed, max_scan);
  }
  uint64_t memory_bytes() const override;

  uint32_t count(int key) const { return counts_[static_cast<size_t>(key)]; }

 private:
  struct Before {
    const LfuAgingPolicy* p;
    bool operator()(int a, int b) const { return p->before(a, b); }
  };
  bool before(int a, int b) const;  // a is evicted before b

  uint64_t aging_period_;
  uint64_t accesses_ = 0;
  uint64_t tick_ = 0;
  std::vector<uint32_t> counts_;     // per key
  std::vector<int32_t> slot_key_;    // per slot, while a candidate
  std::vector<uint64_t> slot_tick_;  // per slot: when it became a candidate
  SlotHeap<Before> heap_;
};

}  // namespace df::stream

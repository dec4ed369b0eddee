#pragma once
// What the policies that keep their candidates in a SlotHeap share (crf, lfu-aging): the heap, ordered by the
// derived policy's before(a, b) (slot a is evicted before slot b), and the EvictionPolicy calls the heap
// answers alone.
#include "stream/eviction_policy.h"
#include "stream/slot_heap.h"

namespace df::stream {

template <class Derived>
class HeapPolicy : public EvictionPolicy {
 public:
  HeapPolicy(const HeapPolicy&) = delete;  // the heap's order points at this object
  HeapPolicy& operator=(const HeapPolicy&) = delete;
  void remove_candidate(int slot) override { heap_.remove(slot); }
  int victim() const override { return heap_.empty() ? kNone : heap_.top(); }
  int victim_if(const SlotFilter& allowed, int max_scan) const override {
    return heap_.best_of_first(allowed, max_scan);
  }

 protected:
  explicit HeapPolicy(int n_slots) : heap_(n_slots, Before{static_cast<const Derived*>(this)}) {}

  struct Before {
    const Derived* p;
    bool operator()(int a, int b) const { return p->before(a, b); }
  };
  SlotHeap<Before> heap_;
};

}  // namespace df::stream

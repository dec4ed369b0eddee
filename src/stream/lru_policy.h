#pragma once
// Least recently used: candidates in the order their last pin was released (a demand access pins, so this is
// the order of last use); the oldest goes first.
#include "stream/eviction_policy.h"
#include "stream/slot_lists.h"

namespace df::stream {

class LruPolicy final : public EvictionPolicy {
 public:
  explicit LruPolicy(int n_slots) : lists_(n_slots, 1) {}
  const char* name() const override { return "lru"; }
  void on_demand(int) override {}
  void add_candidate(int slot, int) override { lists_.push_back(0, slot); }
  void remove_candidate(int slot) override { lists_.remove(slot); }
  int victim() const override { return lists_.empty(0) ? kNone : lists_.front(0); }
  int victim_if(const SlotFilter& allowed, int max_scan) const override {
    for (int s = lists_.front(0); s != SlotLists::kNone && max_scan-- > 0; s = lists_.next(s))
      if (allowed(s)) return s;
    return kNone;
  }
  uint64_t memory_bytes() const override { return lists_.memory_bytes(); }

 private:
  SlotLists lists_;
};

}  // namespace df::stream

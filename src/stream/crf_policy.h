#pragma once
// Combined recency and frequency (CRF, as llama.cpp's expert cache): every use of an expert adds 1 to its
// score, and a score halves every `half_life` tokens of its layer. The candidate with the lowest score now
// goes first. Scores are kept for experts that left the cache. Comparing a·2^(-(now-ta)/h) with
// b·2^(-(now-tb)/h) is comparing log2(a) + ta/h with log2(b) + tb/h, which does not change with `now`: a
// candidate's rank is fixed while it waits, so a heap holds the order.
#include <cstdint>
#include <vector>

#include "stream/eviction_policy.h"
#include "stream/slot_heap.h"
#include "stream/token_clock.h"

namespace df::stream {

class CrfPolicy final : public EvictionPolicy {
 public:
  CrfPolicy(int n_slots, int n_keys, ClockShape clock, double half_life_tokens);
  CrfPolicy(const CrfPolicy&) = delete;  // the heap's order points at this object
  CrfPolicy& operator=(const CrfPolicy&) = delete;
  const char* name() const override { return "crf"; }
  void on_demand(int key) override;
  void add_candidate(int slot, int key) override;
  void remove_candidate(int slot) override { heap_.remove(slot); }
  int victim() const override { return heap_.empty() ? kNone : heap_.top(); }
  int victim_if(const SlotFilter& allowed, int max_scan) const override {
    return heap_.best_of_first(allowed, max_scan);
  }
  uint64_t memory_bytes() const override;

  // The key's score at its layer's current time.
  double score(int key) const;

 private:
  struct Before {
    const CrfPolicy* p;
    bool operator()(int a, int b) const { return p->before(a, b); }
  };
  bool before(int a, int b) const;
  double rank(int key) const;  // log2(score) + last use / half-life: larger is kept longer

  TokenClock clock_;
  double half_life_;
  uint64_t tick_ = 0;
  std::vector<double> score_;      // per key, at its last use
  std::vector<double> last_use_;   // per key, in tokens of its layer
  std::vector<double> slot_rank_;  // per slot, while a candidate
  std::vector<uint64_t> slot_tick_;
  SlotHeap<Before> heap_;
};

}  // namespace df::stream

#pragma once
// LRU with an admission gate: an expert read in for a use that does not follow an earlier use within
// `window` tokens (a first or rare use) enters on probation, at the cold end, and goes before every expert
// admitted as recent; an expert used again while cached, or missed again within the window, joins the LRU
// order of the working set. So one-off uses (a prompt's long tail, a stray token) do not flush what decode
// keeps reusing. Use times are kept for experts that left the cache.
#include <cstdint>
#include <vector>

#include "stream/eviction_policy.h"
#include "stream/slot_lists.h"
#include "stream/token_clock.h"

namespace df::stream {

class GateLruPolicy final : public EvictionPolicy {
 public:
  GateLruPolicy(int n_slots, int n_keys, ClockShape clock, int window_tokens);
  const char* name() const override { return "gate-lru"; }
  void on_demand(int key) override;
  void on_admit(int slot, int key) override;
  void add_candidate(int slot, int key) override;
  void remove_candidate(int slot) override { lists_.remove(slot); }
  int victim() const override;
  int victim_if(const SlotFilter& allowed, int max_scan) const override;
  uint64_t memory_bytes() const override;

 private:
  enum List : int { kProbation, kRecent };
  TokenClock clock_;
  uint64_t window_accesses_;
  std::vector<uint64_t> last_use_;     // per key: its layer's access count after its last use; 0: never
  std::vector<uint8_t> on_probation_;  // per slot: admitted cold and not used since
  SlotLists lists_;
};

}  // namespace df::stream

#pragma once
// Segmented LRU: an expert read into the cache waits on probation (LRU order); used again while cached, it
// moves to the protected segment (LRU order too), which holds at most `protected_percent` of the slots and
// hands its oldest back to probation when full. Victims come from probation first. An expert used once is
// thus evicted before one used twice, however recent the single use.
#include <cstdint>
#include <vector>

#include "stream/eviction_policy.h"
#include "stream/slot_lists.h"

namespace df::stream {

class SlruPolicy final : public EvictionPolicy {
 public:
  SlruPolicy(int n_slots, int protected_percent);
  const char* name() const override { return "slru"; }
  void on_demand(int) override {}
  void on_admit(int slot, int key) override;
  void add_candidate(int slot, int key) override;
  void remove_candidate(int slot) override { lists_.remove(slot); }
  int victim() const override;
  int victim_if(const SlotFilter& allowed, int max_scan) const override;
  uint64_t memory_bytes() const override { return lists_.memory_bytes() + admitted_.capacity(); }

 private:
  enum List : int { kProbation, kProtected };
  int protected_cap_;
  std::vector<uint8_t> admitted_;  // per slot: read in and not yet released since
  SlotLists lists_;
};

}  // namespace df::stream

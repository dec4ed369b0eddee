#include "stream/lfu_aging_policy.h"

namespace df::stream {

LfuAgingPolicy::LfuAgingPolicy(int n_slots, int n_keys, uint64_t aging_period)
    : aging_period_(aging_period ? aging_period : 1),
      counts_(static_cast<size_t>(n_keys), 0),
      slot_key_(static_cast<size_t>(n_slots), -1),
      slot_tick_(static_cast<size_t>(n_slots), 0),
      heap_(n_slots, Before{this}) {}

uint64_t LfuAgingPolicy::memory_bytes() const {
  return counts_.capacity() * sizeof(uint32_t) + slot_key_.capacity() * sizeof(int32_t) +
         slot_tick_.capacity() * sizeof(uint64_t) + heap_.memory_bytes();
}

bool LfuAgingPolicy::before(int a, int b) const {
  const uint32_t ca = counts_[static_cast<size_t>(slot_key_[static_cast<size_t>(a)])];
  const uint32_t cb = counts_[static_cast<size_t>(slot_key_[static_cast<size_t>(b)])];
  if (ca != cb) return ca < cb;
  return slot_tick_[static_cast<size_t>(a)] < slot_tick_[static_cast<size_t>(b)];
}

void LfuAgingPolicy::on_demand(int key) {
  uint32_t& c = counts_[static_cast<size_t>(key)];
  if (c != UINT32_MAX) ++c;
  if (++accesses_ % aging_period_ != 0) return;
  for (uint32_t& v : counts_) v >>= 1;
  // Halving can turn a strict count order into a tie that the release order breaks the other way: rebuild.
  heap_.rebuild();
}

void LfuAgingPolicy::add_candidate(int slot, int key) {
  if (heap_.contains(slot)) heap_.remove(slot);
  slot_key_[static_cast<size_t>(slot)] = key;
  slot_tick_[static_cast<size_t>(slot)] = ++tick_;
  heap_.push(slot);
}

}  // namespace df::stream

#include "stream/lfu_aging_policy.h"

#include <algorithm>

namespace df::stream {

LfuAgingPolicy::LfuAgingPolicy(int n_slots, int n_keys, uint64_t aging_period)
    : aging_period_(aging_period ? aging_period : 1),
      counts_(static_cast<size_t>(n_keys), 0),
      slot_key_(static_cast<size_t>(n_slots), -1),
      slot_tick_(static_cast<size_t>(n_slots), 0),
      heap_pos_(static_cast<size_t>(n_slots), -1) {
  heap_.reserve(static_cast<size_t>(n_slots));
}

uint64_t LfuAgingPolicy::memory_bytes() const {
  return counts_.capacity() * sizeof(uint32_t) + slot_key_.capacity() * sizeof(int32_t) +
         slot_tick_.capacity() * sizeof(uint64_t) + heap_pos_.capacity() * sizeof(int32_t) +
         heap_.capacity() * sizeof(int32_t);
}

bool LfuAgingPolicy::before(int a, int b) const {
  const uint32_t ca = counts_[static_cast<size_t>(slot_key_[static_cast<size_t>(a)])];
  const uint32_t cb = counts_[static_cast<size_t>(slot_key_[static_cast<size_t>(b)])];
  if (ca != cb) return ca < cb;
  return slot_tick_[static_cast<size_t>(a)] < slot_tick_[static_cast<size_t>(b)];
}

void LfuAgingPolicy::place(size_t i, int slot) {
  heap_[i] = slot;
  heap_pos_[static_cast<size_t>(slot)] = static_cast<int32_t>(i);
}

void LfuAgingPolicy::sift_up(size_t i) {
  const int slot = heap_[i];
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (!before(slot, heap_[parent])) break;
    place(i, heap_[parent]);
    i = parent;
  }
  place(i, slot);
}

void LfuAgingPolicy::sift_down(size_t i) {
  const int slot = heap_[i];
  const size_t n = heap_.size();
  while (true) {
    size_t best = 2 * i + 1;
    if (best >= n) break;
    if (best + 1 < n && before(heap_[best + 1], heap_[best])) ++best;
    if (!before(heap_[best], slot)) break;
    place(i, heap_[best]);
    i = best;
  }
  place(i, slot);
}

// The heap's first entries hold its smallest keys (the root exactly, the rest roughly), which is close enough
// for a guess looking for room.
int LfuAgingPolicy::victim_if(const SlotFilter& allowed, int max_scan) const {
  int best = kNone;
  const size_t n = std::min(heap_.size(), static_cast<size_t>(std::max(max_scan, 0)));
  for (size_t i = 0; i < n; ++i) {
    const int s = heap_[i];
    if (allowed(s) && (best == kNone || before(s, best))) best = s;
  }
  return best;
}

void LfuAgingPolicy::on_demand(int key) {
  uint32_t& c = counts_[static_cast<size_t>(key)];
  if (c != UINT32_MAX) ++c;
  if (++accesses_ % aging_period_ != 0) return;
  for (uint32_t& v : counts_) v >>= 1;
  // Halving can turn a strict count order into a tie that the release order breaks the other way: rebuild.
  for (size_t i = heap_.size() / 2; i-- > 0;) sift_down(i);
}

void LfuAgingPolicy::add_candidate(int slot, int key) {
  if (heap_pos_[static_cast<size_t>(slot)] >= 0) remove_candidate(slot);
  slot_key_[static_cast<size_t>(slot)] = key;
  slot_tick_[static_cast<size_t>(slot)] = ++tick_;
  heap_.push_back(slot);  // within the reserved capacity: every slot is in the heap at most once
  sift_up(heap_.size() - 1);
}

void LfuAgingPolicy::remove_candidate(int slot) {
  const int32_t pos = heap_pos_[static_cast<size_t>(slot)];
  if (pos < 0) return;
  heap_pos_[static_cast<size_t>(slot)] = -1;
  const int last = heap_.back();
  heap_.pop_back();
  if (last == slot) return;
  place(static_cast<size_t>(pos), last);
  sift_down(static_cast<size_t>(pos));
  sift_up(static_cast<size_t>(heap_pos_[static_cast<size_t>(last)]));
}

}  // namespace df::stream

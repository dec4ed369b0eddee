#pragma once
// A binary min-heap of candidate slots under an eviction order `Before(a, b)` (a goes before b), with each
// slot's position kept so that a pinned slot leaves in O(log n). Capacity is reserved up front: nothing
// allocates after construction. The order may read state that changes only while a slot is out of the heap,
// or call rebuild() after changing it for slots inside.
#include <algorithm>
#include <cstdint>
#include <vector>

namespace df::stream {

template <class Before>
class SlotHeap {
 public:
  SlotHeap(int n_slots, Before before) : before_(before), pos_(static_cast<size_t>(n_slots), -1) {
    heap_.reserve(static_cast<size_t>(n_slots));
  }

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  int top() const { return heap_.front(); }
  int at(size_t i) const { return heap_[i]; }
  bool contains(int slot) const { return pos_[static_cast<size_t>(slot)] >= 0; }
  uint64_t memory_bytes() const { return (pos_.capacity() + heap_.capacity()) * sizeof(int32_t); }

  void push(int slot) {
    heap_.push_back(slot);  // within the reserved capacity: every slot is in the heap at most once
    sift_up(heap_.size() - 1);
  }
  void remove(int slot) {
    const int32_t pos = pos_[static_cast<size_t>(slot)];
    if (pos < 0) return;
    pos_[static_cast<size_t>(slot)] = -1;
    const int last = heap_.back();
    heap_.pop_back();
    if (last == slot) return;
    place(static_cast<size_t>(pos), last);
    sift_down(static_cast<size_t>(pos));
    sift_up(static_cast<size_t>(pos_[static_cast<size_t>(last)]));
  }
  void rebuild() {
    for (size_t i = heap_.size() / 2; i-- > 0;) sift_down(i);
  }
  // The best of the first `max_scan` entries that `allowed` accepts (the heap's first entries hold its
  // smallest keys: the root exactly, the rest roughly), or -1.
  template <class Allowed>
  int best_of_first(const Allowed& allowed, int max_scan) const {
    int best = -1;
    const size_t n = std::min(heap_.size(), static_cast<size_t>(std::max(max_scan, 0)));
    for (size_t i = 0; i < n; ++i) {
      const int s = heap_[i];
      if (allowed(s) && (best == -1 || before_(s, best))) best = s;
    }
    return best;
  }

 private:
  void place(size_t i, int slot) {
    heap_[i] = slot;
    pos_[static_cast<size_t>(slot)] = static_cast<int32_t>(i);
  }
  void sift_up(size_t i) {
    const int slot = heap_[i];
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (!before_(slot, heap_[parent])) break;
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, slot);
  }
  void sift_down(size_t i) {
    const int slot = heap_[i];
    const size_t n = heap_.size();
    while (true) {
      size_t best = 2 * i + 1;
      if (best >= n) break;
      if (best + 1 < n && before_(heap_[best + 1], heap_[best])) ++best;
      if (!before_(heap_[best], slot)) break;
      place(i, heap_[best]);
      i = best;
    }
    place(i, slot);
  }

  Before before_;
  std::vector<int32_t> pos_;  // per slot: index in heap_, or -1
  std::vector<int32_t> heap_;
};

}  // namespace df::stream

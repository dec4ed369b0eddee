#pragma once
// Fixed-capacity intrusive doubly-linked lists over slot indices 0..n-1, sharing one set of links: a slot is
// in at most one list at a time, and push/remove/pop are O(1) without allocating (the hot path of the cache).
#include <cstdint>
#include <vector>

namespace df::stream {

class SlotLists {
 public:
  static constexpr int kNone = -1;

  SlotLists(int n_slots, int n_lists)
      : prev_(static_cast<size_t>(n_slots), kNone),
        next_(static_cast<size_t>(n_slots), kNone),
        owner_(static_cast<size_t>(n_slots), kNone),
        head_(static_cast<size_t>(n_lists), kNone),
        tail_(static_cast<size_t>(n_lists), kNone),
        size_(static_cast<size_t>(n_lists), 0) {}

  // The list holding `slot`, or kNone.
  int owner(int slot) const { return owner_[u(slot)]; }
  bool empty(int list) const { return head_[u(list)] == kNone; }
  int size(int list) const { return size_[u(list)]; }
  int front(int list) const { return head_[u(list)]; }
  int next(int slot) const { return next_[u(slot)]; }
  uint64_t memory_bytes() const {
    return (prev_.capacity() + next_.capacity() + owner_.capacity() + head_.capacity() + tail_.capacity() +
            size_.capacity()) *
           sizeof(int32_t);
  }

  void push_back(int list, int slot) {
    remove(slot);
    prev_[u(slot)] = tail_[u(list)];
    next_[u(slot)] = kNone;
    if (tail_[u(list)] != kNone)
      next_[u(tail_[u(list)])] = slot;
    else
      head_[u(list)] = slot;
    tail_[u(list)] = slot;
    owner_[u(slot)] = list;
    ++size_[u(list)];
  }

  // Takes `slot` out of whichever list holds it (no-op when none does).
  void remove(int slot) {
    const int list = owner_[u(slot)];
    if (list == kNone) return;
    const int p = prev_[u(slot)], n = next_[u(slot)];
    if (p != kNone)
      next_[u(p)] = n;
    else
      head_[u(list)] = n;
    if (n != kNone)
      prev_[u(n)] = p;
    else
      tail_[u(list)] = p;
    prev_[u(slot)] = next_[u(slot)] = owner_[u(slot)] = kNone;
    --size_[u(list)];
  }

  int pop_front(int list) {
    const int slot = head_[u(list)];
    if (slot != kNone) remove(slot);
    return slot;
  }

 private:
  static size_t u(int i) { return static_cast<size_t>(i); }
  std::vector<int32_t> prev_, next_, owner_;
  std::vector<int32_t> head_, tail_, size_;
};

}  // namespace df::stream

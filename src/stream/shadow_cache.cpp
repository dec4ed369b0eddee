#include "stream/shadow_cache.h"

#include <algorithm>

namespace df::stream {

ShadowCache::ShadowCache(std::unique_ptr<EvictionPolicy> policy, int n_slots, int n_keys, int held)
    : policy_(std::move(policy)),
      n_slots_(n_slots),
      slot_of_key_(static_cast<size_t>(n_keys), -1),
      key_of_slot_(static_cast<size_t>(n_slots), -1),
      holds_(static_cast<size_t>(n_slots), 0),
      // At least one slot stays free of holds, so a miss always finds a victim.
      held_ring_(static_cast<size_t>(std::clamp(held, 0, n_slots > 0 ? n_slots - 1 : 0)), -1) {}

uint64_t ShadowCache::memory_bytes() const {
  return policy_->memory_bytes() +
         (slot_of_key_.capacity() + key_of_slot_.capacity() + holds_.capacity() + held_ring_.capacity()) *
             sizeof(int);
}

bool ShadowCache::access(int key) {
  if (n_slots_ <= 0) return false;
  int slot = slot_of_key_[static_cast<size_t>(key)];
  const bool hit = slot >= 0;
  if (hit) {
    policy_->remove_candidate(slot);
  } else {
    if (used_ < n_slots_) {
      slot = used_++;
    } else {
      slot = policy_->victim();
      policy_->remove_candidate(slot);
      slot_of_key_[static_cast<size_t>(key_of_slot_[static_cast<size_t>(slot)])] = -1;
    }
    key_of_slot_[static_cast<size_t>(slot)] = key;
    slot_of_key_[static_cast<size_t>(key)] = slot;
    policy_->on_admit(slot, key);
  }
  policy_->on_demand(key);
  hold(slot);
  return hit;
}

void ShadowCache::hold(int slot) {
  if (held_ring_.empty()) {
    policy_->add_candidate(slot, key_of_slot_[static_cast<size_t>(slot)]);
    return;
  }
  ++holds_[static_cast<size_t>(slot)];
  // The oldest hold ends once the ring is full.
  if (const int released = held_ring_[held_next_];
      released >= 0 && --holds_[static_cast<size_t>(released)] == 0)
    policy_->add_candidate(released, key_of_slot_[static_cast<size_t>(released)]);
  held_ring_[held_next_] = slot;
  held_next_ = (held_next_ + 1) % held_ring_.size();
}

}  // namespace df::stream

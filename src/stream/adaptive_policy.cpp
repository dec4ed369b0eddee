#include "stream/adaptive_policy.h"

namespace df::stream {

AdaptivePolicy::AdaptivePolicy(const std::array<PolicyKind, kContenders>& kinds, int n_slots, int n_keys,
                               const PolicyOptions& options, int held, double window_accesses)
    : keep_(window_accesses > 1 ? 1.0 - 1.0 / window_accesses : 0.0) {
  for (size_t c = 0; c < kinds.size(); ++c) {
    real_[c] = make_policy(kinds[c], n_slots, n_keys, options);
    shadow_[c].emplace(make_policy(kinds[c], n_slots, n_keys, options), n_slots, n_keys, held);
  }
}

uint64_t AdaptivePolicy::memory_bytes() const {
  uint64_t bytes = 0;
  for (size_t c = 0; c < real_.size(); ++c) bytes += real_[c]->memory_bytes() + shadow_[c]->memory_bytes();
  return bytes;
}

void AdaptivePolicy::on_demand(int key) {
  for (size_t c = 0; c < real_.size(); ++c) {
    real_[c]->on_demand(key);
    weighted_hits_[c] = weighted_hits_[c] * keep_ + (shadow_[c]->access(key) ? 1.0 : 0.0);
  }
  // A tie keeps the leader: the order does not flap between equals.
  for (size_t c = 0; c < real_.size(); ++c)
    if (weighted_hits_[c] > weighted_hits_[leader_]) leader_ = c;
}

void AdaptivePolicy::on_admit(int slot, int key) {
  for (auto& p : real_) p->on_admit(slot, key);
}

void AdaptivePolicy::add_candidate(int slot, int key) {
  for (auto& p : real_) p->add_candidate(slot, key);
}

void AdaptivePolicy::remove_candidate(int slot) {
  for (auto& p : real_) p->remove_candidate(slot);
}

}  // namespace df::stream

#include "stream/crf_policy.h"

#include <cmath>

namespace df::stream {

CrfPolicy::CrfPolicy(int n_slots, int n_keys, ClockShape clock, double half_life_tokens)
    : clock_(clock, n_keys),
      half_life_(half_life_tokens > 0 ? half_life_tokens : 1),
      score_(static_cast<size_t>(n_keys), 0.0),
      last_use_(static_cast<size_t>(n_keys), 0.0),
      slot_rank_(static_cast<size_t>(n_slots), 0.0),
      slot_tick_(static_cast<size_t>(n_slots), 0),
      heap_(n_slots, Before{this}) {}

uint64_t CrfPolicy::memory_bytes() const {
  return clock_.memory_bytes() +
         (score_.capacity() + last_use_.capacity() + slot_rank_.capacity()) * sizeof(double) +
         slot_tick_.capacity() * sizeof(uint64_t) + heap_.memory_bytes();
}

double CrfPolicy::score(int key) const {
  const size_t k = static_cast<size_t>(key);
  return score_[k] * std::exp2(-(clock_.tokens(key) - last_use_[k]) / half_life_);
}

double CrfPolicy::rank(int key) const {
  const size_t k = static_cast<size_t>(key);
  return std::log2(score_[k]) + last_use_[k] / half_life_;
}

bool CrfPolicy::before(int a, int b) const {
  const double ra = slot_rank_[static_cast<size_t>(a)], rb = slot_rank_[static_cast<size_t>(b)];
  if (ra != rb) return ra < rb;
  return slot_tick_[static_cast<size_t>(a)] < slot_tick_[static_cast<size_t>(b)];
}

void CrfPolicy::on_demand(int key) {
  clock_.tick(key);
  const size_t k = static_cast<size_t>(key);
  score_[k] = score(key) + 1.0;
  last_use_[k] = clock_.tokens(key);
}

void CrfPolicy::add_candidate(int slot, int key) {
  if (heap_.contains(slot)) heap_.remove(slot);
  // A key never demanded (score 0) ranks lowest of all.
  slot_rank_[static_cast<size_t>(slot)] = score_[static_cast<size_t>(key)] > 0 ? rank(key) : -HUGE_VAL;
  slot_tick_[static_cast<size_t>(slot)] = ++tick_;
  heap_.push(slot);
}

}  // namespace df::stream

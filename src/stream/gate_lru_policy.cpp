#include "stream/gate_lru_policy.h"

namespace df::stream {

GateLruPolicy::GateLruPolicy(int n_slots, int n_keys, ClockShape clock, int window_tokens)
    : clock_(clock, n_keys),
      window_accesses_(static_cast<uint64_t>(window_tokens > 0 ? window_tokens : 1) *
                       static_cast<uint64_t>(clock.top_k)),
      last_use_(static_cast<size_t>(n_keys), 0),
      on_probation_(static_cast<size_t>(n_slots), 0),
      lists_(n_slots, 2) {}

uint64_t GateLruPolicy::memory_bytes() const {
  return clock_.memory_bytes() + last_use_.capacity() * sizeof(uint64_t) + on_probation_.capacity() +
         lists_.memory_bytes();
}

void GateLruPolicy::on_demand(int key) {
  clock_.tick(key);
  last_use_[static_cast<size_t>(key)] = clock_.accesses(key);
}

// Called before this access's on_demand(): last_use_ still holds the previous use.
void GateLruPolicy::on_admit(int slot, int key) {
  const uint64_t last = last_use_[static_cast<size_t>(key)];
  const bool recent = last != 0 && clock_.accesses(key) - last < window_accesses_;
  on_probation_[static_cast<size_t>(slot)] = recent ? 0 : 1;
}

void GateLruPolicy::add_candidate(int slot, int) {
  uint8_t& probation = on_probation_[static_cast<size_t>(slot)];
  lists_.push_back(probation ? kProbation : kRecent, slot);
  probation = 0;  // released once: a use after this one is a reuse while cached
}

int GateLruPolicy::victim() const {
  if (!lists_.empty(kProbation)) return lists_.front(kProbation);
  return lists_.empty(kRecent) ? kNone : lists_.front(kRecent);
}

int GateLruPolicy::victim_if(const SlotFilter& allowed, int max_scan) const {
  for (const List list : {kProbation, kRecent})
    for (int s = lists_.front(list); s != SlotLists::kNone && max_scan > 0; s = lists_.next(s), --max_scan)
      if (allowed(s)) return s;
  return kNone;
}

}  // namespace df::stream

#include "stream/slru_policy.h"

#include <algorithm>

namespace df::stream {

SlruPolicy::SlruPolicy(int n_slots, int protected_percent)
    : protected_cap_(std::max(1, n_slots * std::clamp(protected_percent, 1, 100) / 100)),
      admitted_(static_cast<size_t>(n_slots), 0),
      lists_(n_slots, 2) {}

void SlruPolicy::on_admit(int slot, int) { admitted_[static_cast<size_t>(slot)] = 1; }

void SlruPolicy::add_candidate(int slot, int) {
  uint8_t& fresh = admitted_[static_cast<size_t>(slot)];
  if (fresh) {
    fresh = 0;
    lists_.push_back(kProbation, slot);
    return;
  }
  lists_.push_back(kProtected, slot);
  if (lists_.size(kProtected) > protected_cap_) lists_.push_back(kProbation, lists_.front(kProtected));
}

int SlruPolicy::victim() const {
  if (!lists_.empty(kProbation)) return lists_.front(kProbation);
  return lists_.empty(kProtected) ? kNone : lists_.front(kProtected);
}

int SlruPolicy::victim_if(const SlotFilter& allowed, int max_scan) const {
  for (const List list : {kProbation, kProtected})
    for (int s = lists_.front(list); s != SlotLists::kNone && max_scan > 0; s = lists_.next(s), --max_scan)
      if (allowed(s)) return s;
  return kNone;
}

}  // namespace df::stream

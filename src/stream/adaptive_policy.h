#pragma once
// Follows whichever of several policies would have kept more of the recent demand accesses. Which policy
// wins depends on the routing: on the recorded traces of real many-layer models LRU keeps more than CRF
// (recency), on single-layer traces and on routing with always-popular experts CRF keeps more (frequency);
// no fixed choice is best for every model. Each contender runs twice: once over the real cache's candidates
// (so its order is ready whenever it leads) and once as a shadow cache of the same size on the same demand
// accesses (so its hit rate is known without having been followed). The victim is the order of the
// contender whose shadow hit most over the last `window` accesses (exponentially weighted).
#include <array>
#include <cstdint>
#include <memory>
#include <optional>

#include "stream/eviction_policy.h"
#include "stream/shadow_cache.h"

namespace df::stream {

class AdaptivePolicy final : public EvictionPolicy {
 public:
  static constexpr int kContenders = 2;
  // The contenders' kinds (never kAdaptive); `held`: accesses the shadows hold from eviction (the top-k).
  AdaptivePolicy(const std::array<PolicyKind, kContenders>& kinds, int n_slots, int n_keys,
                 const PolicyOptions& options, int held, double window_accesses);
  const char* name() const override { return "adaptive"; }
  void on_demand(int key) override;
  void on_admit(int slot, int key) override;
  void add_candidate(int slot, int key) override;
  void remove_candidate(int slot) override;
  int victim() const override { return real_[leader_]->victim(); }
  int victim_if(const SlotFilter& allowed, int max_scan) const override {
    return real_[leader_]->victim_if(allowed, max_scan);
  }
  uint64_t memory_bytes() const override;

  // The contender whose order the victims follow now, and its shadow's weighted hits.
  const char* leader() const { return real_[leader_]->name(); }
  double weighted_hits(int contender) const { return weighted_hits_[static_cast<size_t>(contender)]; }

 private:
  std::array<std::unique_ptr<EvictionPolicy>, kContenders> real_;
  std::array<std::optional<ShadowCache>, kContenders> shadow_;
  std::array<double, kContenders> weighted_hits_{};
  double keep_;  // the weight an access keeps per later access: 1 - 1 / window
  size_t leader_ = 0;
};

}  // namespace df::stream

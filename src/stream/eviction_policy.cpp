#include "stream/eviction_policy.h"

#include <array>

#include "stream/adaptive_policy.h"
#include "stream/crf_policy.h"
#include "stream/gate_lru_policy.h"
#include "stream/lfu_aging_policy.h"
#include "stream/lru_policy.h"
#include "stream/slru_policy.h"
#include "util/error.h"

namespace df::stream {
namespace {

constexpr std::array<const char*, 6> kNames = {"lru", "lfu", "crf", "gate-lru", "slru", "adaptive"};
constexpr std::array<PolicyKind, 6> kKinds = {PolicyKind::kLru,  PolicyKind::kLfuAging,
                                              PolicyKind::kCrf,  PolicyKind::kGateLru,
                                              PolicyKind::kSlru, PolicyKind::kAdaptive};

// adaptive's window in accesses, per slot of the cache (a cache of fewer than 256 slots counts as 256).
// Replays of the recorded traces chose it (docs/PERF.md, session 24): a quarter of the slot count follows
// whichever order is ahead now, which beat both contenders on the real many-layer traces; windows of one or
// four slot counts came out lower there, and within a point on the rest.
constexpr double kAdaptiveWindowSlots = 0.25;

}  // namespace

std::span<const char* const> policy_names() { return kNames; }

PolicyKind parse_policy(std::string_view text) {
  if (text == "lfu-aging") return PolicyKind::kLfuAging;
  for (size_t i = 0; i < kNames.size(); ++i)
    if (text == kNames[i]) return kKinds[i];
  fail("--cache-policy: '{}' is not a policy; use lru, lfu, crf, gate-lru, slru or adaptive", text);
}

const char* policy_name(PolicyKind kind) {
  if (kind == PolicyKind::kLfuAging) return "lfu-aging";
  for (size_t i = 0; i < kKinds.size(); ++i)
    if (kind == kKinds[i]) return kNames[i];
  return "?";
}

std::unique_ptr<EvictionPolicy> make_policy(PolicyKind kind, int n_slots, int n_keys,
                                            const PolicyOptions& options) {
  const int n_expert = options.n_expert > 0 ? options.n_expert : 1;
  const int top_k = options.top_k > 0 ? options.top_k : 1;
  switch (kind) {
    case PolicyKind::kLru:
      return std::make_unique<LruPolicy>(n_slots);
    case PolicyKind::kLfuAging: {
      const uint64_t period = options.lfu_aging_period ? options.lfu_aging_period
                                                       : static_cast<uint64_t>(n_slots > 16 ? n_slots : 16);
      return std::make_unique<LfuAgingPolicy>(n_slots, n_keys, period);
    }
    case PolicyKind::kCrf:
      return std::make_unique<CrfPolicy>(n_slots, n_keys, ClockShape{n_expert, top_k},
                                         options.crf_half_life_tokens);
    case PolicyKind::kGateLru:
      return std::make_unique<GateLruPolicy>(n_slots, n_keys, ClockShape{n_expert, top_k},
                                             options.gate_window_tokens);
    case PolicyKind::kSlru:
      return std::make_unique<SlruPolicy>(n_slots, options.slru_protected_percent);
    case PolicyKind::kAdaptive: {
      const double window = options.adaptive_window_accesses > 0
                                ? options.adaptive_window_accesses
                                : kAdaptiveWindowSlots * static_cast<double>(n_slots > 256 ? n_slots : 256);
      return std::make_unique<AdaptivePolicy>(std::array{PolicyKind::kLru, PolicyKind::kCrf}, n_slots, n_keys,
                                              options, top_k, window);
    }
  }
  fail("make_policy: unknown policy");
}

}  // namespace df::stream

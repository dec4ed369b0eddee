#include "stream/eviction_policy.h"

#include "stream/lfu_aging_policy.h"
#include "stream/lru_policy.h"
#include "util/error.h"

namespace df::stream {

PolicyKind parse_policy(std::string_view text) {
  if (text == "lru") return PolicyKind::kLru;
  if (text == "lfu" || text == "lfu-aging") return PolicyKind::kLfuAging;
  fail("--cache-policy: '{}' is not a policy; use lru or lfu", text);
}

const char* policy_name(PolicyKind kind) { return kind == PolicyKind::kLru ? "lru" : "lfu-aging"; }

std::unique_ptr<EvictionPolicy> make_policy(PolicyKind kind, int n_slots, int n_keys,
                                            const PolicyOptions& options) {
  if (kind == PolicyKind::kLru) return std::make_unique<LruPolicy>(n_slots);
  const uint64_t period = options.lfu_aging_period ? options.lfu_aging_period
                                                   : static_cast<uint64_t>(n_slots > 16 ? n_slots : 16);
  return std::make_unique<LfuAgingPolicy>(n_slots, n_keys, period);
}

}  // namespace df::stream

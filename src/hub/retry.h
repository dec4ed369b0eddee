#pragma once
// How often and how patiently a request is retried after a timeout, a dropped connection or a 5xx: the wait
// doubles from base_ms, capped at a minute. DISKFORMER_PULL_RETRY_MS sets the base (tests use a few ms).
#include <atomic>
#include <cstdint>

namespace df::hub {

struct RetryPolicy {
  int max_attempts = 8;  // tries of one request without progress before giving up
  uint64_t base_ms = 1000;
  static RetryPolicy from_env();
};

// Sleeps before try number `attempt` (2, 3, ...); returns early, false, when `cancel` is set.
bool wait_before_retry(const RetryPolicy& policy, int attempt, const std::atomic<bool>* cancel);

}  // namespace df::hub

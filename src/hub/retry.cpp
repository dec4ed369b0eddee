#include "hub/retry.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "util/error.h"

namespace df::hub {

RetryPolicy RetryPolicy::from_env() {
  RetryPolicy p;
  if (const char* v = std::getenv("DISKFORMER_PULL_RETRY_MS"); v && *v) {
    char* end = nullptr;
    const unsigned long long ms = std::strtoull(v, &end, 10);
    if (*end != '\0' || ms > 600000)
      fail("DISKFORMER_PULL_RETRY_MS='{}': expected milliseconds from 0 to 600000", v);
    p.base_ms = ms;
  }
  return p;
}

bool wait_before_retry(const RetryPolicy& policy, int attempt, const std::atomic<bool>* cancel) {
  const int doublings = std::clamp(attempt - 2, 0, 16);
  const uint64_t ms = std::min<uint64_t>(policy.base_ms << doublings, 60000);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    if (cancel && cancel->load()) return false;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(20), until - std::chrono::steady_clock::now()));
  }
  return !(cancel && cancel->load());
}

}  // namespace df::hub

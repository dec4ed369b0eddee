#pragma once
// What /metrics (Prometheus text) and /props report: the scheduler's counters and the expert cache's
// telemetry (hit rate overall and per MoE layer, bytes read per token, I/O-wait share of step time).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/scheduler.h"
#include "stream/cache_telemetry.h"

namespace df::server {

// `cache`: absent when the experts are resident (no cache, nothing read).
std::string prometheus_text(const SchedulerCounters& c, int n_slots,
                            const std::optional<stream::TelemetrySnapshot>& cache);
// The same figures as JSON, for the chat page's panel.
nlohmann::json stats_json(const SchedulerCounters& c, int n_slots,
                          const std::optional<stream::TelemetrySnapshot>& cache);

}  // namespace df::server

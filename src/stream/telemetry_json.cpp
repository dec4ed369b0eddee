#include "stream/telemetry_json.h"

namespace df::stream {
namespace {

nlohmann::json counters_json(const LayerCounters& c) {
  return {{"accesses", c.accesses},
          {"hits", c.hits},
          {"misses", c.misses},
          {"prefetch_rounds", c.prefetch_rounds},
          {"prefetch_hits", c.prefetch_hits},
          {"prefetch_issued", c.prefetch_issued},
          {"prefetch_dropped", c.prefetch_dropped},
          {"prefetch_cancelled", c.prefetch_cancelled},
          {"reads", c.reads},
          {"read_failures", c.read_failures},
          {"bytes_read", c.bytes_read},
          {"read_ns", c.read_ns},
          {"wait_ns", c.wait_ns},
          {"host_computed", c.host_computed}};
}

}  // namespace

nlohmann::json telemetry_json(const TelemetrySnapshot& s) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : s.layers) layers.push_back(counters_json(l));
  return {{"tokens", s.tokens},
          {"step_ns", s.step_ns},
          {"read_busy_ns", s.read_busy_ns},
          {"hit_rate", s.hit_rate()},
          {"cache_hit_rate", s.cache_hit_rate()},
          {"bytes_per_token", s.bytes_per_token()},
          {"read_bandwidth_bytes_per_s", s.read_bandwidth()},
          {"io_wait_share", s.io_wait_share()},
          {"prefetch_precision", s.prefetch_precision()},
          {"prefetch_recall", s.prefetch_recall()},
          {"total", counters_json(s.total)},
          {"layers", std::move(layers)}};
}

}  // namespace df::stream

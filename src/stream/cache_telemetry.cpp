#include "stream/cache_telemetry.h"

#include <fmt/format.h>

#include "stream/byte_size.h"

namespace df::stream {
namespace {

double ratio(double num, double den) { return den > 0 ? num / den : 0.0; }

}  // namespace

void LayerCounters::add(const LayerCounters& o) {
  accesses += o.accesses;
  hits += o.hits;
  misses += o.misses;
  prefetch_rounds += o.prefetch_rounds;
  prefetch_hits += o.prefetch_hits;
  prefetch_issued += o.prefetch_issued;
  prefetch_dropped += o.prefetch_dropped;
  prefetch_cancelled += o.prefetch_cancelled;
  reads += o.reads;
  read_failures += o.read_failures;
  bytes_read += o.bytes_read;
  read_ns += o.read_ns;
  wait_ns += o.wait_ns;
  host_computed += o.host_computed;
}

double TelemetrySnapshot::hit_rate() const {
  return ratio(static_cast<double>(total.hits), static_cast<double>(total.accesses));
}
double TelemetrySnapshot::cache_hit_rate() const {
  // prefetch_hits counts a subset of hits; the guard only keeps a broken counter from wrapping around.
  const uint64_t held = total.hits >= total.prefetch_hits ? total.hits - total.prefetch_hits : 0;
  return ratio(static_cast<double>(held), static_cast<double>(total.accesses));
}
double TelemetrySnapshot::bytes_per_token() const {
  return ratio(static_cast<double>(total.bytes_read), static_cast<double>(tokens));
}
double TelemetrySnapshot::read_bandwidth() const {
  return ratio(static_cast<double>(total.bytes_read), static_cast<double>(read_busy_ns) * 1e-9);
}
double TelemetrySnapshot::io_wait_share() const {
  return ratio(static_cast<double>(total.wait_ns), static_cast<double>(step_ns));
}
double TelemetrySnapshot::prefetch_precision() const {
  return ratio(static_cast<double>(total.prefetch_hits), static_cast<double>(total.prefetch_issued));
}
double TelemetrySnapshot::prefetch_recall() const {
  return ratio(static_cast<double>(total.prefetch_hits), static_cast<double>(total.accesses));
}

TelemetrySnapshot CacheTelemetry::snapshot() const {
  TelemetrySnapshot s;
  s.layers = layers_;
  for (const auto& l : layers_) s.total.add(l);
  s.tokens = tokens_;
  s.step_ns = step_ns_;
  s.read_busy_ns = busy_ns_;
  return s;
}

TelemetrySnapshot merge_disjoint_layers(const std::vector<TelemetrySnapshot>& parts) {
  TelemetrySnapshot s;
  if (parts.empty()) return s;
  s.tokens = parts.front().tokens;
  s.step_ns = parts.front().step_ns;
  for (const TelemetrySnapshot& p : parts) {
    if (s.layers.size() < p.layers.size()) s.layers.resize(p.layers.size());
    for (size_t l = 0; l < p.layers.size(); ++l) s.layers[l].add(p.layers[l]);
    s.total.add(p.total);
    s.read_busy_ns += p.read_busy_ns;
  }
  return s;
}

void CacheTelemetry::reset() {
  for (auto& l : layers_) l = LayerCounters{};
  tokens_ = step_ns_ = busy_ns_ = 0;
}

std::string format_telemetry_table(const TelemetrySnapshot& s) {
  std::string out =
      fmt::format("{:>5} {:>8} {:>7} {:>8} {:>10} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7}\n", "layer", "access",
                  "hit%", "reads", "read", "read ms", "wait ms", "pf iss", "pf used", "prec%", "rec%");
  auto row = [&](const std::string& name, const LayerCounters& c) {
    out += fmt::format(
        "{:>5} {:>8} {:>7.1f} {:>8} {:>10} {:>9.1f} {:>9.1f} {:>8} {:>8} {:>7.1f} {:>7.1f}\n", name,
        c.accesses, 100 * ratio(static_cast<double>(c.hits), static_cast<double>(c.accesses)), c.reads,
        format_bytes(c.bytes_read), static_cast<double>(c.read_ns) * 1e-6,
        static_cast<double>(c.wait_ns) * 1e-6, c.prefetch_issued, c.prefetch_hits,
        100 * ratio(static_cast<double>(c.prefetch_hits), static_cast<double>(c.prefetch_issued)),
        100 * ratio(static_cast<double>(c.prefetch_hits), static_cast<double>(c.accesses)));
  };
  for (size_t l = 0; l < s.layers.size(); ++l) row(std::to_string(l), s.layers[l]);
  row("all", s.total);
  out += fmt::format(
      "hit rate {:.1f}% ({:.1f}% held by the cache, the rest read ahead), {} read per token over {} tokens, "
      "read bandwidth {}/s, I/O wait {:.1f}% of step "
      "time, "
      "read-ahead precision {:.1f}% recall {:.1f}% ({} guesses dropped, {} cancelled), {} failed reads{}\n",
      100 * s.hit_rate(), 100 * s.cache_hit_rate(), format_bytes(static_cast<uint64_t>(s.bytes_per_token())),
      s.tokens, format_bytes(static_cast<uint64_t>(s.read_bandwidth())), 100 * s.io_wait_share(),
      100 * s.prefetch_precision(), 100 * s.prefetch_recall(), s.total.prefetch_dropped,
      s.total.prefetch_cancelled, s.total.read_failures,
      s.total.host_computed ? fmt::format(", {} experts computed on the host", s.total.host_computed) : "");
  return out;
}

}  // namespace df::stream

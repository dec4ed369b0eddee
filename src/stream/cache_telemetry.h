#pragma once
// What the expert cache did, per MoE layer and in total: hits, reads, bytes, time reading and time waiting,
// and how good the read-ahead guesses were. Counters are plain integers updated under the cache's lock; a
// snapshot is a copy that the caller formats at leisure.
#include <cstdint>
#include <string>
#include <vector>

namespace df::stream {

struct LayerCounters {
  uint64_t accesses = 0;         // demand acquisitions of an expert
  uint64_t hits = 0;             // ... that found it resident or already on its way (no new read)
  uint64_t misses = 0;           // ... that queued a demand read
  uint64_t prefetch_rounds = 0;  // prefetch() calls naming this layer: one per guessing layer and step
  uint64_t prefetch_hits = 0;    // hits on a slot a guess had filled (or was filling): guesses that were used
  uint64_t prefetch_issued = 0;  // guesses that took a slot and queued a read
  uint64_t prefetch_dropped = 0;    // guesses that found no slot they were allowed to take
  uint64_t prefetch_cancelled = 0;  // queued guesses withdrawn before their read started
  uint64_t reads = 0;               // records read (demand and guesses, failed ones included)
  uint64_t read_failures = 0;
  uint64_t bytes_read = 0;
  uint64_t read_ns = 0;  // sum over reads of start → verified (reads overlap: this exceeds wall time)
  uint64_t wait_ns = 0;  // time the caller spent blocked in wait() for this layer's records
  // A device tier's experts computed from their RAM records instead (--cpu-misses): neither accesses nor
  // reads of the device tier.
  uint64_t host_computed = 0;

  void add(const LayerCounters& o);
};

struct TelemetrySnapshot {
  std::vector<LayerCounters> layers;  // index = MoE layer
  LayerCounters total;
  uint64_t tokens = 0;        // from record_step()
  uint64_t step_ns = 0;       // from record_step(): the time those tokens took
  uint64_t read_busy_ns = 0;  // wall time with at least one read in flight

  // Demand acquisitions that needed no new read, read-ahead hits included (the prefetch did its job).
  double hit_rate() const;
  // Those the cache already held without a guess bringing them: reuse across tokens alone.
  double cache_hit_rate() const;
  double bytes_per_token() const;
  double read_bandwidth() const;      // bytes per second of read-busy time
  double io_wait_share() const;       // wait time / step time
  double prefetch_precision() const;  // guesses used / guesses issued
  double prefetch_recall() const;     // demand accesses served by a guess / demand accesses
};

class CacheTelemetry {
 public:
  explicit CacheTelemetry(int n_layers) : layers_(static_cast<size_t>(n_layers)) {}
  LayerCounters& layer(int l) { return layers_[static_cast<size_t>(l)]; }
  void add_step(uint64_t tokens, uint64_t ns) {
    tokens_ += tokens;
    step_ns_ += ns;
  }
  void add_busy(uint64_t ns) { busy_ns_ += ns; }
  TelemetrySnapshot snapshot() const;
  void reset();

 private:
  std::vector<LayerCounters> layers_;
  uint64_t tokens_ = 0, step_ns_ = 0, busy_ns_ = 0;
};

// The telemetry of several caches over the same steps that each serve their own MoE layers (the device
// tiers of a layer split): counters and busy time summed, tokens and step time those of the first.
TelemetrySnapshot merge_disjoint_layers(const std::vector<TelemetrySnapshot>& parts);

// A human table: one row per MoE layer and a total row, then the run's figures.
std::string format_telemetry_table(const TelemetrySnapshot& s);

}  // namespace df::stream

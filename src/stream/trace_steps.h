#pragma once
// How a replay walks a routing trace (stream/trace_replay.h): the rows' sessions and an index to find a
// row by (session, position, layer), the batches the engine would run (a prompt cut into prefill chunks,
// a decode row alone) and the experts one batch acquires, in the engine's or the router's order. Shared by
// the one-cache replay and the two-tier replay.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "stream/cache_book.h"
#include "stream/cache_telemetry.h"
#include "stream/routing_trace.h"
#include "stream/trace_replay.h"

namespace df::stream {

// Where each row sits: its session (a file may hold several, one after the other) and an index from
// (session, position, layer) to the row, for guesses that look at other tokens or layers.
struct TraceIndex {
  std::vector<int32_t> session;
  std::unordered_map<uint64_t, size_t> row_at;

  explicit TraceIndex(const RoutingTrace& t);
  const size_t* find(int32_t s, int32_t pos, int32_t layer) const;
  uint64_t tokens(const RoutingTrace& t, bool prompt) const;  // distinct (session, position) of those rows
};

struct TraceStep {
  int layer;
  size_t r0, r1;  // rows [r0, r1)
  bool decode;
};

// The batches in trace order: consecutive prompt rows of one layer and session up to that layer's chunk
// (engine order), every other row alone.
std::vector<TraceStep> trace_steps(const RoutingTrace& t, const TraceIndex& ix, const ReplayOptions& o,
                                   const std::vector<int>& chunk_of_layer);

// The experts one step acquires, in the order it acquires them.
void step_ids(const RoutingTrace& t, const TraceStep& st, AccessOrder order, std::vector<int32_t>& out);

// The ids read-ahead guesses for layer `target` while a step's rows run (the trace's rows of that layer, for
// the previous token or, with kOracle, the same one), sorted and distinct.
void step_guesses(const RoutingTrace& t, const TraceIndex& ix, const TraceStep& st, int target,
                  GuessKind guess, std::vector<int32_t>& out);

// A cache of `slots` for the replay's policy.
CacheBookOptions replay_book_options(int n_layers, int n_expert, uint64_t slots, const ReplayOptions& o);

// One replayed cache: its book and counters, reads landing when drained.
class ReplayCache {
 public:
  ReplayCache(int n_layers, int n_expert, uint64_t slots, const ReplayOptions& o);
  CacheBook& book() { return book_; }
  CacheTelemetry& telemetry() { return telemetry_; }
  uint64_t reads() const { return reads_; }  // of every layer: a step's guesses read records of later layers

  // Every queued read lands, demand reads first (the reader's priority).
  void drain();
  // Pins one expert, letting the reads land first where only a read in flight could make room.
  int pin(int layer, int expert);

 private:
  CacheTelemetry telemetry_;
  CacheBook book_;
  uint64_t reads_ = 0;
};

LayerCounters counters_minus(const LayerCounters& a, const LayerCounters& b);

// The experts `st` acquires through the cache, into `used` (step_ids); false for a prompt step that is
// skipped or read past the cache (PrefillMode), the latter counted in read_past[layer] as misses and reads.
bool cached_step_ids(const RoutingTrace& t, const TraceStep& st, const ReplayOptions& o,
                     std::vector<int32_t>& used, std::vector<LayerCounters>& read_past);

}  // namespace df::stream

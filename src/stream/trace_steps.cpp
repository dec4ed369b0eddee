#include "stream/trace_steps.h"

#include <algorithm>
#include <set>

#include "util/error.h"

namespace df::stream {
namespace {

uint64_t index_key(int32_t s, int32_t pos, int32_t layer) {
  return (static_cast<uint64_t>(s) << 40) ^ (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 16) ^
         static_cast<uint64_t>(layer);
}

}  // namespace

TraceIndex::TraceIndex(const RoutingTrace& t) : session(t.rows(), 0) {
  int32_t s = 0;
  for (size_t r = 0; r < t.rows(); ++r) {
    if (r > 0) {
      const bool prompt_after_decode = t.prompt_row(r) && !t.prompt_row(r - 1);
      const bool decode_restarts = !t.prompt_row(r) && !t.prompt_row(r - 1) && t.pos[r] < t.pos[r - 1];
      if (prompt_after_decode || decode_restarts) ++s;
    }
    session[r] = s;
    row_at[index_key(s, t.pos[r], t.layer[r])] = r;
  }
}

const size_t* TraceIndex::find(int32_t s, int32_t pos, int32_t layer) const {
  const auto it = row_at.find(index_key(s, pos, layer));
  return it == row_at.end() ? nullptr : &it->second;
}

uint64_t TraceIndex::tokens(const RoutingTrace& t, bool prompt) const {
  std::set<std::pair<int32_t, int32_t>> seen;
  for (size_t r = 0; r < t.rows(); ++r)
    if (t.prompt_row(r) == prompt) seen.insert({session[r], t.pos[r]});
  return seen.size();
}

std::vector<TraceStep> trace_steps(const RoutingTrace& t, const TraceIndex& ix, const ReplayOptions& o,
                                   const std::vector<int>& chunk_of_layer) {
  std::vector<TraceStep> steps;
  for (size_t r = 0; r < t.rows();) {
    size_t end = r + 1;
    if (o.order == AccessOrder::kEngine && t.prompt_row(r)) {
      const size_t cap = static_cast<size_t>(chunk_of_layer[static_cast<size_t>(t.layer[r])]);
      while (end < t.rows() && end - r < cap && t.prompt_row(end) && t.layer[end] == t.layer[r] &&
             ix.session[end] == ix.session[r] && t.pos[end] == t.pos[end - 1] + 1)
        ++end;
    }
    steps.push_back({t.layer[r], r, end, !t.prompt_row(r)});
    r = end;
  }
  return steps;
}

void step_ids(const RoutingTrace& t, const TraceStep& st, AccessOrder order, std::vector<int32_t>& out) {
  out.clear();
  for (size_t r = st.r0; r < st.r1; ++r) out.insert(out.end(), t.row_ids(r).begin(), t.row_ids(r).end());
  if (order == AccessOrder::kEngine) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
}

void step_guesses(const RoutingTrace& t, const TraceIndex& ix, const TraceStep& st, int target,
                  GuessKind guess, std::vector<int32_t>& out) {
  out.clear();
  for (size_t r = st.r0; r < st.r1; ++r) {
    const int32_t pos = guess == GuessKind::kOracle ? t.pos[r] : t.pos[r] - 1;
    if (const size_t* g = ix.find(ix.session[r], pos, target))
      out.insert(out.end(), t.row_ids(*g).begin(), t.row_ids(*g).end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

CacheBookOptions replay_book_options(int n_layers, int n_expert, uint64_t slots, const ReplayOptions& o) {
  CacheBookOptions b;
  b.n_layers = n_layers;
  b.n_expert = n_expert;
  b.n_slots = slots;
  b.policy = o.policy;
  b.policy_options = o.policy_options;
  return b;
}

ReplayCache::ReplayCache(int n_layers, int n_expert, uint64_t slots, const ReplayOptions& o)
    : telemetry_(n_layers), book_(replay_book_options(n_layers, n_expert, slots, o), telemetry_) {}

void ReplayCache::drain() {
  bool guess = false;
  for (int s; (s = book_.start_read(true, &guess)) >= 0;) {
    ++telemetry_.layer(book_.key(s) / book_.n_expert()).reads;
    ++reads_;
    book_.finish_read(s, true);
  }
}

int ReplayCache::pin(int layer, int expert) {
  int s = book_.pin(layer, expert);
  if (s == CacheBook::kWaitForRead) {
    drain();
    s = book_.pin(layer, expert);
  }
  if (s < 0) fail("replay: no slot for MoE layer {} expert {}", layer, expert);
  return s;
}

LayerCounters counters_minus(const LayerCounters& a, const LayerCounters& b) {
  LayerCounters d;
  d.accesses = a.accesses - b.accesses;
  d.hits = a.hits - b.hits;
  d.misses = a.misses - b.misses;
  d.prefetch_rounds = a.prefetch_rounds - b.prefetch_rounds;
  d.prefetch_hits = a.prefetch_hits - b.prefetch_hits;
  d.prefetch_issued = a.prefetch_issued - b.prefetch_issued;
  d.prefetch_dropped = a.prefetch_dropped - b.prefetch_dropped;
  d.prefetch_cancelled = a.prefetch_cancelled - b.prefetch_cancelled;
  d.reads = a.reads - b.reads;
  return d;
}

bool cached_step_ids(const RoutingTrace& t, const TraceStep& st, const ReplayOptions& o,
                     std::vector<int32_t>& used, std::vector<LayerCounters>& read_past) {
  if (!st.decode && o.prefill == PrefillMode::kSkip) return false;
  step_ids(t, st, o.order, used);
  if (st.decode || o.prefill != PrefillMode::kBypass) return true;
  LayerCounters& c = read_past[static_cast<size_t>(st.layer)];
  c.accesses += used.size();
  c.misses += used.size();
  c.reads += used.size();
  return false;
}

}  // namespace df::stream

#include "stream/trace_replay.h"

#include <algorithm>
#include <memory>
#include <set>
#include <unordered_map>

#include "stream/cache_book.h"
#include "stream/cache_budget.h"
#include "stream/trace_steps.h"
#include "util/error.h"

namespace df::stream {
namespace {

void check_options(const RoutingTrace& t, const ReplayOptions& o) {
  if (o.layer_slots.empty() && o.slots < static_cast<uint64_t>(t.k))
    fail("replay: {} slots cannot hold the {} experts one token needs at once", o.slots, t.k);
  if (!o.layer_slots.empty()) {
    if (o.layer_slots.size() != static_cast<size_t>(t.n_layers))
      fail("replay: {} per-layer cache sizes for a trace of {} layers", o.layer_slots.size(), t.n_layers);
    for (int s : o.layer_slots)
      if (s < t.k)
        fail("replay: a per-layer cache of {} slots cannot hold the {} experts of one token", s, t.k);
    if (o.lookahead > 0)
      fail(
          "replay: read-ahead crosses layers, so it needs the one cache of all layers (--slots), not "
          "per-layer caches");
  }
  if (o.belady && o.lookahead > 0) fail("replay: Belady's optimum is computed without read-ahead");
  if (o.prefill_chunk < 1) fail("replay: the prefill chunk must be at least 1");
}

// Belady's offline optimum over one shard's access sequence: on a miss with the cache full, evict the
// resident expert used again furthest in the future (never is furthest).
struct Access {
  int32_t layer, expert;
  bool decode;
};
void belady(const std::vector<Access>& seq, uint64_t capacity, int n_expert, std::vector<LayerCounters>& all,
            std::vector<LayerCounters>& dec) {
  constexpr int64_t kNever = INT64_MAX;
  std::vector<int64_t> next(seq.size(), kNever);
  std::unordered_map<int64_t, int64_t> last;
  for (int64_t i = static_cast<int64_t>(seq.size()) - 1; i >= 0; --i) {
    const int64_t key = static_cast<int64_t>(seq[static_cast<size_t>(i)].layer) * n_expert +
                        seq[static_cast<size_t>(i)].expert;
    const auto it = last.find(key);
    next[static_cast<size_t>(i)] = it == last.end() ? kNever : it->second;
    last[key] = i;
  }
  std::set<std::pair<int64_t, int64_t>> by_next;  // (next use, key) of every resident expert
  std::unordered_map<int64_t, int64_t> resident;  // key -> its next use
  for (size_t i = 0; i < seq.size(); ++i) {
    const Access& a = seq[i];
    const int64_t key = static_cast<int64_t>(a.layer) * n_expert + a.expert;
    LayerCounters& c = all[static_cast<size_t>(a.layer)];
    LayerCounters* d = a.decode ? &dec[static_cast<size_t>(a.layer)] : nullptr;
    ++c.accesses;
    if (d) ++d->accesses;
    const auto it = resident.find(key);
    if (it != resident.end()) {
      ++c.hits;
      if (d) ++d->hits;
      by_next.erase({it->second, key});
    } else {
      ++c.misses;
      ++c.reads;
      if (d) ++d->misses, ++d->reads;
      if (resident.size() >= capacity) {
        const auto victim = std::prev(by_next.end());
        resident.erase(victim->second);
        by_next.erase(victim);
      }
    }
    resident[key] = next[i];
    by_next.insert({next[i], key});
  }
}

}  // namespace

namespace {

double hits_over_accesses(const LayerCounters& c) {
  return c.accesses ? static_cast<double>(c.hits) / static_cast<double>(c.accesses) : 0.0;
}

double per_token(uint64_t count, uint64_t tokens) {
  return tokens ? static_cast<double>(count) / static_cast<double>(tokens) : 0.0;
}

}  // namespace

double ReplayResult::hit_rate() const { return hits_over_accesses(decode.accesses ? decode : total); }

double ReplayResult::layer_hit_rate(int l) const {
  const size_t ul = static_cast<size_t>(l);
  return hits_over_accesses(decode.accesses ? decode_layers[ul] : layers[ul]);
}

double ReplayResult::reads_per_token() const { return per_token(decode.reads, decode_tokens); }

double ReplayResult::device_hit_rate() const {
  return hits_over_accesses(device_decode.accesses ? device_decode : device_total);
}

double ReplayResult::copies_per_token() const { return per_token(device_decode.reads, decode_tokens); }

ReplayResult replay_trace(const RoutingTrace& t, const ReplayOptions& o) {
  if (o.device_slots > 0) return replay_two_tiers(t, o);
  check_options(t, o);
  const TraceIndex ix(t);
  const int L = t.n_layers, E = std::max(t.n_expert, o.n_expert);
  const bool per_layer = !o.layer_slots.empty();

  ReplayResult res;
  res.layers.assign(static_cast<size_t>(L), {});
  res.decode_layers.assign(static_cast<size_t>(L), {});
  res.decode_tokens = ix.tokens(t, false);
  res.prompt_tokens = o.prefill == PrefillMode::kSkip ? 0 : ix.tokens(t, true);

  std::vector<int> chunk(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    const uint64_t slots = per_layer ? static_cast<uint64_t>(o.layer_slots[static_cast<size_t>(l)]) : o.slots;
    chunk[static_cast<size_t>(l)] = max_prefill_chunk(slots, t.k, E, o.prefill_chunk);
  }
  const std::vector<TraceStep> steps = trace_steps(t, ix, o, chunk);

  // Shard s serves layers [first_layer[s], ...): one shard for the engine's shared cache, one per layer else.
  std::vector<std::unique_ptr<ReplayCache>> shards;
  if (!o.belady) {
    if (per_layer)
      for (int l = 0; l < L; ++l)
        shards.push_back(std::make_unique<ReplayCache>(
            1, E, static_cast<uint64_t>(o.layer_slots[static_cast<size_t>(l)]), o));
    else
      shards.push_back(
          std::make_unique<ReplayCache>(L, E, std::min<uint64_t>(o.slots, static_cast<uint64_t>(L) * E), o));
  }
  const auto shard_of = [&](int layer) -> ReplayCache& {
    return *shards[per_layer ? static_cast<size_t>(layer) : 0];
  };
  const auto local = [&](int layer) { return per_layer ? 0 : layer; };
  res.slots = 0;
  if (per_layer)
    for (int s : o.layer_slots) res.slots += static_cast<uint64_t>(s);
  else
    res.slots = std::min<uint64_t>(o.slots, static_cast<uint64_t>(L) * E);

  std::vector<std::vector<Access>> belady_seq(per_layer ? static_cast<size_t>(L) : 1);
  std::vector<int32_t> used, guesses;
  std::vector<int> pinned;
  std::vector<LayerCounters> bypassed(static_cast<size_t>(L));
  const size_t wave = static_cast<size_t>(t.k);
  for (const TraceStep& st : steps) {
    if (!cached_step_ids(t, st, o, used, bypassed)) continue;
    const int l = st.layer;
    if (o.belady) {
      auto& seq = belady_seq[per_layer ? static_cast<size_t>(l) : 0];
      for (int32_t e : used) seq.push_back({l, e, st.decode});
      continue;
    }
    ReplayCache& sh = shard_of(l);
    CacheBook& book = sh.book();
    for (int ahead = 1; ahead <= o.lookahead && l + ahead < L; ++ahead) {
      const int target = l + ahead;
      step_guesses(t, ix, st, target, o.guess, guesses);
      book.prefetch(target, guesses);
    }
    const LayerCounters before = sh.telemetry().layer(local(l));
    const uint64_t reads_before = sh.reads();
    // As the engine (moe_block.cpp run_experts): announce what fits, then waves of k acquired and released.
    book.enter_layer(local(l));
    const size_t announced = std::min<size_t>(used.size(), static_cast<size_t>(book.n_slots()));
    pinned.assign(used.size(), -1);
    for (size_t i = 0; i < announced; ++i) pinned[i] = sh.pin(local(l), used[i]);
    sh.drain();
    for (size_t w0 = 0; w0 < used.size(); w0 += wave) {
      const size_t w1 = std::min(used.size(), w0 + wave);
      for (size_t i = w0; i < w1; ++i)
        if (pinned[i] < 0) pinned[i] = sh.pin(local(l), used[i]);
      sh.drain();
      for (size_t i = w0; i < w1; ++i) book.unpin(pinned[i]);
    }
    if (st.decode) {
      // The step's reads are what it cost the disk, its guesses for later layers included.
      LayerCounters delta = counters_minus(sh.telemetry().layer(local(l)), before);
      delta.reads = sh.reads() - reads_before;
      res.decode_layers[static_cast<size_t>(l)].add(delta);
    }
  }
  if (o.belady) {
    for (size_t s = 0; s < belady_seq.size(); ++s) {
      const uint64_t cap = per_layer ? static_cast<uint64_t>(o.layer_slots[s]) : res.slots;
      std::vector<LayerCounters> a(static_cast<size_t>(L)), d(static_cast<size_t>(L));
      belady(belady_seq[s], cap, E, a, d);
      for (int l = 0; l < L; ++l) {
        res.layers[static_cast<size_t>(l)].add(a[static_cast<size_t>(l)]);
        res.decode_layers[static_cast<size_t>(l)].add(d[static_cast<size_t>(l)]);
      }
    }
  } else {
    // Everything the cache counted, guesses included (they land on the layer guessed, outside the steps).
    for (int l = 0; l < L; ++l) res.layers[static_cast<size_t>(l)] = shard_of(l).telemetry().layer(local(l));
  }
  for (int l = 0; l < L; ++l) res.layers[static_cast<size_t>(l)].add(bypassed[static_cast<size_t>(l)]);
  for (int l = 0; l < L; ++l) {
    res.total.add(res.layers[static_cast<size_t>(l)]);
    res.decode.add(res.decode_layers[static_cast<size_t>(l)]);
  }
  return res;
}

std::vector<int> learned_layer_split(const RoutingTrace& t, int slots_per_layer) {
  const int L = t.n_layers, E = t.n_expert;
  if (slots_per_layer < t.k)
    fail("replay: {} slots per layer cannot hold the {} experts of one token", slots_per_layer, t.k);
  // hits[l][c]: LRU hits of layer l's decode rows with c slots (from the stack distance of every access).
  std::vector<std::vector<uint64_t>> hits(static_cast<size_t>(L),
                                          std::vector<uint64_t>(static_cast<size_t>(E) + 2, 0));
  std::vector<std::vector<int32_t>> stack(static_cast<size_t>(L));
  for (size_t r = 0; r < t.rows(); ++r) {
    if (t.prompt_row(r)) continue;
    auto& s = stack[static_cast<size_t>(t.layer[r])];
    for (int32_t e : t.row_ids(r)) {
      const auto it = std::find(s.begin(), s.end(), e);
      if (it != s.end()) {
        ++hits[static_cast<size_t>(t.layer[r])][static_cast<size_t>(it - s.begin()) + 1];
        s.erase(it);
      }
      s.insert(s.begin(), e);
    }
  }
  for (auto& h : hits)
    for (size_t c = 1; c < h.size(); ++c) h[c] += h[c - 1];
  std::vector<int> split(static_cast<size_t>(L), t.k);
  int64_t left = static_cast<int64_t>(L) * (slots_per_layer - t.k);
  while (left-- > 0) {
    int best = -1;
    uint64_t gain = 0;
    for (int l = 0; l < L; ++l) {
      const int c = split[static_cast<size_t>(l)];
      if (c >= E) continue;
      const uint64_t g = hits[static_cast<size_t>(l)][static_cast<size_t>(c) + 1] -
                         hits[static_cast<size_t>(l)][static_cast<size_t>(c)];
      // Ties (no gain anywhere, typically) go to the smallest cache: an even split where the trace says
      // nothing.
      if (best < 0 || g > gain || (g == gain && c < split[static_cast<size_t>(best)])) best = l, gain = g;
    }
    if (best < 0) break;
    ++split[static_cast<size_t>(best)];
  }
  return split;
}

GuessQuality guess_quality(const RoutingTrace& t, GuessRule rule) {
  const TraceIndex ix(t);
  GuessQuality q;
  std::vector<int32_t> guess;
  for (size_t r = 0; r < t.rows(); ++r) {
    if (t.prompt_row(r)) continue;
    guess.clear();
    const auto add = [&](int32_t pos, int32_t layer) {
      if (const size_t* g = ix.find(ix.session[r], pos, layer))
        guess.insert(guess.end(), t.row_ids(*g).begin(), t.row_ids(*g).end());
    };
    if (rule == GuessRule::kPreviousToken) add(t.pos[r] - 1, t.layer[r]);
    if (rule == GuessRule::kPreviousTokens4)
      for (int back = 1; back <= 4; ++back) add(t.pos[r] - back, t.layer[r]);
    if (rule == GuessRule::kPreviousLayerSameIds) add(t.pos[r], t.layer[r] - 1);
    if (guess.empty()) continue;
    std::sort(guess.begin(), guess.end());
    guess.erase(std::unique(guess.begin(), guess.end()), guess.end());
    q.guessed += guess.size();
    q.used += static_cast<uint64_t>(t.k);
    for (int32_t e : t.row_ids(r))
      if (std::binary_search(guess.begin(), guess.end(), e)) ++q.correct;
  }
  q.precision = q.guessed ? static_cast<double>(q.correct) / static_cast<double>(q.guessed) : 0;
  q.recall = q.used ? static_cast<double>(q.correct) / static_cast<double>(q.used) : 0;
  return q;
}

}  // namespace df::stream

// `diskformer replay`'s engine on synthetic traces (determinism, Belady as a ceiling, LRU against an
// independent LRU, compulsory misses, prefill modes, the learned split, read-ahead guesses) and, when
// ../shared/traces is there, the hit rates published for the real traces.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <list>
#include <set>

#include "stream/eviction_policy.h"
#include "stream/routing_trace.h"
#include "stream/trace_replay.h"
#include "util/error.h"

namespace df::stream {
namespace {

uint64_t next_random(uint64_t& s) {
  s = s * 6364136223846793005ULL + 1442695040888963407ULL;
  return s >> 33;
}

// A session of `prompt` prompt tokens (as llama.cpp writes them: all positions of layer 0, then layer 1,
// ...) and `decode` decode tokens, k of E experts per layer, each drawn from a slowly drifting hot set with
// probability 3/4, else uniformly: real routing's locality, roughly.
RoutingTrace synthetic(int layers, int E, int k, int prompt, int decode, uint64_t seed) {
  RoutingTrace t;
  t.name = "synthetic";
  t.k = k;
  std::vector<std::vector<int32_t>> hot(static_cast<size_t>(layers));
  for (auto& h : hot)
    for (int i = 0; i < 2 * k; ++i)
      h.push_back(static_cast<int32_t>(next_random(seed) % static_cast<uint64_t>(E)));
  std::vector<int32_t> row;
  const auto draw = [&](int l) {
    row.clear();
    auto& h = hot[static_cast<size_t>(l)];
    if (next_random(seed) % 8 == 0)
      h[next_random(seed) % h.size()] = static_cast<int32_t>(next_random(seed) % static_cast<uint64_t>(E));
    while (row.size() < static_cast<size_t>(k)) {
      const int32_t e = next_random(seed) % 4
                            ? h[next_random(seed) % h.size()]
                            : static_cast<int32_t>(next_random(seed) % static_cast<uint64_t>(E));
      if (std::find(row.begin(), row.end(), e) == row.end()) row.push_back(e);
    }
  };
  for (int l = 0; l < layers; ++l)
    for (int p = -prompt; p < 0; ++p) {
      draw(l);
      t.add_row(p, l, row);
    }
  for (int p = 0; p < decode; ++p)
    for (int l = 0; l < layers; ++l) {
      draw(l);
      t.add_row(p, l, row);
    }
  t.n_expert = E;
  return t;
}

void expect_equal(const LayerCounters& a, const LayerCounters& b, const std::string& what) {
  EXPECT_EQ(a.accesses, b.accesses) << what;
  EXPECT_EQ(a.hits, b.hits) << what;
  EXPECT_EQ(a.misses, b.misses) << what;
  EXPECT_EQ(a.reads, b.reads) << what;
  EXPECT_EQ(a.prefetch_issued, b.prefetch_issued) << what;
  EXPECT_EQ(a.prefetch_hits, b.prefetch_hits) << what;
}

TEST(StreamReplay, TheSameTraceAndOptionsGiveTheSameCountsEveryTime) {
  const RoutingTrace t = synthetic(4, 32, 4, 20, 60, 7);
  for (const char* policy : policy_names())
    for (int lookahead : {0, 1, 2}) {
      ReplayOptions o;
      o.slots = 40;
      o.policy = parse_policy(policy);
      o.lookahead = lookahead;
      o.prefill_chunk = 8;
      const ReplayResult a = replay_trace(t, o), b = replay_trace(t, o);
      for (int l = 0; l < t.n_layers; ++l) {
        const std::string what =
            std::string(policy) + " lookahead " + std::to_string(lookahead) + " layer " + std::to_string(l);
        expect_equal(a.layers[static_cast<size_t>(l)], b.layers[static_cast<size_t>(l)], what);
        expect_equal(a.decode_layers[static_cast<size_t>(l)], b.decode_layers[static_cast<size_t>(l)], what);
      }
      EXPECT_EQ(a.total.accesses, a.total.hits + a.total.misses);
      EXPECT_EQ(a.decode_tokens, 60u);
      EXPECT_EQ(a.prompt_tokens, 20u);
      if (lookahead > 0) {
        EXPECT_GT(a.total.prefetch_issued, 0u) << policy;
      } else {
        EXPECT_EQ(a.total.reads, a.total.misses) << "without read-ahead every read is a miss";
      }
    }
}

// Least recently used over each layer's ids in the router's order, written plainly.
double plain_lru_decode_hit_rate(const RoutingTrace& t, size_t capacity) {
  std::vector<std::list<int32_t>> lru(static_cast<size_t>(t.n_layers));
  uint64_t hits = 0, n = 0;
  for (size_t r = 0; r < t.rows(); ++r) {
    if (t.prompt_row(r)) continue;
    auto& c = lru[static_cast<size_t>(t.layer[r])];
    for (int32_t e : t.row_ids(r)) {
      ++n;
      const auto it = std::find(c.begin(), c.end(), e);
      if (it != c.end()) {
        ++hits;
        c.erase(it);
      } else if (c.size() == capacity) {
        c.pop_back();
      }
      c.push_front(e);
    }
  }
  return static_cast<double>(hits) / static_cast<double>(n);
}

TEST(StreamReplay, PerLayerLruInTraceOrderIsPlainLruAndBeladyIsTheCeiling) {
  const RoutingTrace t = synthetic(3, 48, 6, 10, 120, 11);
  for (int per_layer : {6, 12, 24}) {
    ReplayOptions o;
    o.layer_slots.assign(3, per_layer);
    o.order = AccessOrder::kTrace;
    o.prefill = PrefillMode::kSkip;
    const double lru = replay_trace(t, o).hit_rate();
    EXPECT_DOUBLE_EQ(lru, plain_lru_decode_hit_rate(t, static_cast<size_t>(per_layer))) << per_layer;
    o.belady = true;
    const ReplayResult best = replay_trace(t, o);
    for (const char* policy : policy_names()) {
      ReplayOptions p = o;
      p.belady = false;
      p.policy = parse_policy(policy);
      EXPECT_LE(replay_trace(t, p).total.hits, best.total.hits) << policy << " " << per_layer;
    }
    EXPECT_GT(best.hit_rate(), lru);
  }
}

TEST(StreamReplay, ACacheThatHoldsEverythingMissesEachExpertOnce) {
  const RoutingTrace t = synthetic(4, 16, 4, 12, 40, 3);
  std::set<std::pair<int, int>> distinct;
  for (size_t r = 0; r < t.rows(); ++r)
    for (int32_t e : t.row_ids(r)) distinct.insert({t.layer[r], e});
  for (const char* policy : policy_names()) {
    ReplayOptions o;
    o.slots = 4 * 16;
    o.policy = parse_policy(policy);
    EXPECT_EQ(replay_trace(t, o).total.misses, distinct.size()) << policy;
  }
}

TEST(StreamReplay, PrefillRowsCanBeCachedBypassedOrSkipped) {
  const RoutingTrace t = synthetic(2, 32, 4, 40, 30, 5);
  ReplayOptions o;
  o.slots = 24;
  o.prefill_chunk = 16;
  const ReplayResult cached = replay_trace(t, o);
  o.prefill = PrefillMode::kBypass;
  const ReplayResult bypass = replay_trace(t, o);
  o.prefill = PrefillMode::kSkip;
  const ReplayResult skip = replay_trace(t, o);
  // A prompt chunk acquires its union once: at most min(E, chunk k) per layer and chunk.
  EXPECT_EQ(cached.total.accesses, bypass.total.accesses);
  EXPECT_GT(cached.total.accesses, cached.decode.accesses);
  EXPECT_EQ(skip.total.accesses, skip.decode.accesses);
  // Bypassed prompt experts are all read and leave the cache as it was: decode sees what skipping sees.
  EXPECT_EQ(bypass.total.hits, bypass.decode.hits);
  EXPECT_EQ(bypass.decode.hits, skip.decode.hits);
  EXPECT_EQ(bypass.total.reads - bypass.decode.reads, bypass.total.accesses - bypass.decode.accesses);
}

TEST(StreamReplay, BudgetsBelowOneTokenAndContradictoryOptionsAreRefused) {
  const RoutingTrace t = synthetic(2, 16, 4, 0, 5, 1);
  ReplayOptions o;
  o.slots = 3;
  EXPECT_THROW(replay_trace(t, o), Error);
  o.slots = 0;
  o.layer_slots = {8, 8};
  o.lookahead = 1;
  EXPECT_THROW(replay_trace(t, o), Error);
  o.layer_slots = {8};
  o.lookahead = 0;
  EXPECT_THROW(replay_trace(t, o), Error);
}

TEST(StreamReplay, TheLearnedSplitSpendsTheBudgetWhereReuseIs) {
  // Layer 0 reuses four experts all the time; layer 1 never repeats an expert.
  RoutingTrace t;
  t.k = 2;
  for (int p = 0; p < 64; ++p) {
    const int32_t a[] = {static_cast<int32_t>(p % 4), static_cast<int32_t>((p + 1) % 4)};
    const int32_t b[] = {static_cast<int32_t>(2 * p), static_cast<int32_t>(2 * p + 1)};
    t.add_row(p, 0, a);
    t.add_row(p, 1, b);
  }
  t.n_expert = 128;
  EXPECT_EQ(learned_layer_split(t, 3), (std::vector<int>{4, 2}));
  // Where more slots gain nothing anywhere, they are shared out evenly.
  EXPECT_EQ(learned_layer_split(t, 10), (std::vector<int>{10, 10}));
  EXPECT_THROW(learned_layer_split(t, 1), Error);
}

TEST(StreamReplay, GuessQualityCountsWhatWasGuessedAndUsed) {
  RoutingTrace t;
  t.k = 2;
  const int32_t rows[][2] = {{1, 2}, {5, 6}, {1, 3}, {5, 7}, {3, 4}, {1, 2}};  // pos 0..2, layers 0 and 1
  for (int i = 0; i < 6; ++i) t.add_row(i / 2, i % 2, rows[i]);
  t.n_expert = 8;
  const GuessQuality prev = guess_quality(t, GuessRule::kPreviousToken);
  // pos 1: {1,2}→{1,3}: 1 of 2; {5,6}→{5,7}: 1; pos 2: {1,3}→{3,4}: 1; {5,7}→{1,2}: 0.
  EXPECT_EQ(prev.guessed, 8u);
  EXPECT_EQ(prev.correct, 3u);
  EXPECT_DOUBLE_EQ(prev.precision, 3.0 / 8);
  EXPECT_DOUBLE_EQ(prev.recall, 3.0 / 8);
  const GuessQuality layer = guess_quality(t, GuessRule::kPreviousLayerSameIds);
  EXPECT_EQ(layer.guessed, 6u);  // layer 1 rows only
  EXPECT_EQ(layer.correct, 0u + 0u + 0u);
  const GuessQuality four = guess_quality(t, GuessRule::kPreviousTokens4);
  EXPECT_EQ(four.used, 8u);
  EXPECT_EQ(four.guessed, 10u);  // pos 2 guesses the union of pos 0 and 1: {1,2,3} and {5,6,7}
  EXPECT_EQ(four.correct, 3u);
}

// A device tier above a RAM tier that holds every record: each record is read from disk once, and the device
// tier takes the decisions one cache of its size takes (its copies are that cache's reads).
TEST(StreamReplayTiers, ARamTierHoldingEverythingReadsEachRecordOnceAndTheDeviceTierIsTheOneCache) {
  const RoutingTrace t = synthetic(4, 32, 4, 0, 80, 21);
  std::set<std::pair<int, int>> distinct;
  for (size_t r = 0; r < t.rows(); ++r)
    for (int32_t e : t.row_ids(r)) distinct.insert({t.layer[r], e});
  for (const char* policy : policy_names())
    for (uint64_t device : {4u, 9u, 40u}) {
      SCOPED_TRACE(std::string(policy) + " device " + std::to_string(device));
      ReplayOptions one;
      one.slots = device;
      one.policy = parse_policy(policy);
      one.policy_options.top_k = t.k;
      ReplayOptions tiers = one;
      tiers.slots = 4 * 32;
      tiers.device_slots = device;
      const ReplayResult a = replay_trace(t, one), b = replay_trace(t, tiers);
      EXPECT_EQ(b.device_total.accesses, a.total.accesses);
      EXPECT_EQ(b.device_total.hits, a.total.hits);
      EXPECT_EQ(b.device_total.misses, a.total.misses);
      EXPECT_EQ(b.device_total.reads, a.total.reads) << "copies up";
      EXPECT_EQ(b.total.accesses, b.device_total.misses) << "the RAM tier sees the device tier's misses";
      EXPECT_EQ(b.total.reads, distinct.size());
      EXPECT_EQ(b.device_slots, device);
      EXPECT_DOUBLE_EQ(b.copies_per_token(), static_cast<double>(a.total.reads) / 80.0);
    }
}

// The exclusive RAM tier (a study): a record copied up leaves RAM and the device tier's victim comes back
// down, so with LRU both tiers read from disk about what one LRU over all their slots reads, less than the
// engine's inclusive RAM tier, whose slots partly repeat the device tier's.
TEST(StreamReplayTiers, AnExclusiveRamTierReadsAboutWhatOneLruOfBothTiersWould) {
  const RoutingTrace t = synthetic(6, 64, 4, 0, 300, 33);
  for (const auto& [device, ram] : {std::pair<uint64_t, uint64_t>{24, 48}, {48, 48}, {32, 128}}) {
    SCOPED_TRACE(std::to_string(device) + " + " + std::to_string(ram));
    ReplayOptions o;
    o.slots = ram;
    o.device_slots = device;
    const ReplayResult inclusive = replay_trace(t, o);
    o.ram_tier = RamTier::kExclusive;
    const ReplayResult exclusive = replay_trace(t, o);
    ReplayOptions one;
    one.slots = device + ram;
    const ReplayResult both = replay_trace(t, one);
    EXPECT_EQ(exclusive.device_total.hits, inclusive.device_total.hits) << "the device tier is the same";
    EXPECT_LT(exclusive.total.reads, inclusive.total.reads);
    // Not always exact: the engine's order pins a step's experts before copying any, so a step's own victim
    // can be asked for again in the same step.
    EXPECT_NEAR(static_cast<double>(exclusive.total.reads), static_cast<double>(both.total.reads),
                0.01 * static_cast<double>(both.total.reads));
  }
}

TEST(StreamReplayTiers, TiersTooSmallOrCombinedWithPerLayerCachesOrBeladyAreRefused) {
  const RoutingTrace t = synthetic(2, 16, 4, 0, 5, 1);
  ReplayOptions o;
  o.slots = 8;
  o.device_slots = 3;
  EXPECT_THROW(replay_trace(t, o), Error);
  o.device_slots = 8;
  o.slots = 3;
  EXPECT_THROW(replay_trace(t, o), Error);
  o.slots = 8;
  o.belady = true;
  EXPECT_THROW(replay_trace(t, o), Error);
  o.belady = false;
  o.layer_slots = {8, 8};
  EXPECT_THROW(replay_trace(t, o), Error);
}

// The hit rates ../shared/traces/README.md publishes: per-layer caches, decode rows only, the router's order.
struct Published {
  const char* file;
  double lru[4], belady[4];
};

TEST(StreamReplay, RealTracesGiveThePublishedLruAndBeladyHitRates) {
  const std::filesystem::path dir = std::filesystem::path(DF_GOLDEN_DIR).parent_path() / "traces";
  const Published published[] = {
      {"qwen36-35b-merged.csv", {51.6, 66.6, 75.2, 81.0}, {68.6, 80.5, 86.0, 89.0}},
      {"qwen38-flash-next-chat.csv", {48.2, 62.1, 69.4, 75.2}, {65.1, 76.8, 82.7, 86.2}},
  };
  if (!std::filesystem::exists(dir / published[0].file)) GTEST_SKIP() << "no routing traces in " << dir;
  for (const Published& p : published) {
    const RoutingTrace t = read_routing_trace((dir / p.file).string());
    const int sizes[] = {16, 32, 48, 64};
    for (int i = 0; i < 4; ++i) {
      ReplayOptions o;
      o.layer_slots.assign(static_cast<size_t>(t.n_layers), sizes[i]);
      o.order = AccessOrder::kTrace;
      o.prefill = PrefillMode::kSkip;
      EXPECT_NEAR(100 * replay_trace(t, o).hit_rate(), p.lru[i], 0.05) << p.file << " lru " << sizes[i];
      o.belady = true;
      EXPECT_NEAR(100 * replay_trace(t, o).hit_rate(), p.belady[i], 0.05) << p.file << " belady " << sizes[i];
    }
  }
}

}  // namespace
}  // namespace df::stream

// Eviction orders of the policies on their own, and the fixed-capacity lists under them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "stream/adaptive_policy.h"
#include "stream/crf_policy.h"
#include "stream/eviction_policy.h"
#include "stream/gate_lru_policy.h"
#include "stream/lfu_aging_policy.h"
#include "stream/lru_policy.h"
#include "stream/shadow_cache.h"
#include "stream/slot_lists.h"
#include "stream/slru_policy.h"
#include "util/error.h"

namespace df::stream {
namespace {

// Evicts every candidate in turn and returns the slots in eviction order.
std::vector<int> drain(EvictionPolicy& p) {
  std::vector<int> order;
  for (int s = p.victim(); s != EvictionPolicy::kNone; s = p.victim()) {
    order.push_back(s);
    p.remove_candidate(s);
  }
  return order;
}

TEST(StreamPolicy, ParsesNames) {
  EXPECT_EQ(parse_policy("lru"), PolicyKind::kLru);
  EXPECT_EQ(parse_policy("lfu"), PolicyKind::kLfuAging);
  EXPECT_EQ(parse_policy("lfu-aging"), PolicyKind::kLfuAging);
  EXPECT_EQ(parse_policy("crf"), PolicyKind::kCrf);
  EXPECT_EQ(parse_policy("gate-lru"), PolicyKind::kGateLru);
  EXPECT_EQ(parse_policy("slru"), PolicyKind::kSlru);
  EXPECT_EQ(parse_policy("adaptive"), PolicyKind::kAdaptive);
  EXPECT_THROW(parse_policy("fifo"), Error);
  for (const char* name : policy_names()) {
    const PolicyKind kind = parse_policy(name);
    EXPECT_STREQ(make_policy(kind, 4, 16)->name(), policy_name(kind));
  }
}

TEST(StreamPolicy, LruEvictsInReleaseOrder) {
  auto p = make_policy(PolicyKind::kLru, 6, 100);
  for (int s : {3, 1, 4, 0}) p->add_candidate(s, s * 10);
  p->remove_candidate(1);   // pinned again ...
  p->add_candidate(1, 10);  // ... and released: now the most recent
  p->remove_candidate(5);   // not a candidate: no effect
  EXPECT_EQ(drain(*p), (std::vector<int>{3, 4, 0, 1}));
}

TEST(StreamPolicy, LfuEvictsTheLeastUsedThenTheOldest) {
  auto p = make_policy(PolicyKind::kLfuAging, 5, 50, PolicyOptions{1000});
  // keys 10, 11, 12, 13 on slots 0..3; demand counts 3, 1, 2, 1
  for (int k : {10, 10, 10, 11, 12, 12, 13}) p->on_demand(k);
  p->add_candidate(0, 10);
  p->add_candidate(3, 13);
  p->add_candidate(1, 11);
  p->add_candidate(2, 12);
  EXPECT_EQ(drain(*p), (std::vector<int>{3, 1, 2, 0}));
}

TEST(StreamPolicy, LfuRemembersExpertsThatLeftTheCache) {
  auto p = make_policy(PolicyKind::kLfuAging, 4, 50, PolicyOptions{1000});
  for (int i = 0; i < 5; ++i) p->on_demand(7);  // popular, evicted, now back in slot 2
  p->on_demand(8);
  p->add_candidate(2, 7);
  p->add_candidate(1, 8);
  EXPECT_EQ(p->victim(), 1);
}

TEST(StreamPolicy, LfuAgeingLetsRecentUseBeatOldPopularity) {
  LfuAgingPolicy p(4, 10, /*aging_period=*/4);
  for (int i = 0; i < 8; ++i) p.on_demand(0);  // popular long ago: 4 → halved 2, +4 → halved 3
  EXPECT_EQ(p.count(0), 3u);
  for (int i = 0; i < 4; ++i) p.on_demand(1);  // in use now: 4 → halved 2, while key 0 decays to 1
  EXPECT_EQ(p.count(0), 1u);
  EXPECT_EQ(p.count(1), 2u);
  p.add_candidate(0, 0);
  p.add_candidate(1, 1);
  EXPECT_EQ(p.victim(), 0);  // plain LFU (8 uses against 4) would have kept key 0
}

TEST(StreamPolicy, LfuAgeingRebuildsTheHeapWhenCountsTie) {
  LfuAgingPolicy p(4, 10, /*aging_period=*/6);
  for (int k : {0, 0, 0}) p.on_demand(k);  // key 0: 3
  for (int k : {1, 1}) p.on_demand(k);     // key 1: 2
  p.add_candidate(0, 1);                   // slot 0 (key 1) released first
  p.add_candidate(1, 0);                   // slot 1 (key 0) released later
  EXPECT_EQ(p.victim(), 0);
  p.on_demand(5);  // 6th access: key 0 → 1, key 1 → 1: a tie, the older release (slot 0) goes first
  EXPECT_EQ(p.victim(), 0);
  p.remove_candidate(0);
  EXPECT_EQ(p.victim(), 1);
}

TEST(StreamPolicy, LfuHeapStaysConsistentUnderChurn) {
  constexpr int kSlots = 64;
  LfuAgingPolicy p(kSlots, 256, 97);
  uint64_t state = 12345;
  auto next = [&] { return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  std::vector<int> key_of(kSlots, -1);
  for (int step = 0; step < 5000; ++step) {
    const int slot = static_cast<int>(next() % kSlots);
    if (key_of[slot] >= 0 && next() % 2) {
      p.remove_candidate(slot);
      key_of[slot] = -1;
    } else {
      const int key = static_cast<int>(next() % 256);
      if (std::find(key_of.begin(), key_of.end(), key) != key_of.end())
        continue;  // one slot per key, as in the cache
      p.on_demand(key);
      p.remove_candidate(slot);
      p.add_candidate(slot, key);
      key_of[slot] = key;
    }
    // The victim has the smallest count of all candidates.
    const int v = p.victim();
    uint32_t best = UINT32_MAX;
    for (int s = 0; s < kSlots; ++s)
      if (key_of[s] >= 0) best = std::min(best, p.count(key_of[s]));
    if (v == EvictionPolicy::kNone) {
      ASSERT_EQ(best, UINT32_MAX);
    } else {
      ASSERT_EQ(p.count(key_of[v]), best) << "step " << step;
    }
  }
}

TEST(StreamPolicy, CrfDecaysUsesWithTheHalfLife) {
  // Keys of one layer of 8 experts, top-1: every access is a token. Half-life 2 tokens.
  CrfPolicy p(4, 8, ClockShape{8, 1}, 2.0);
  for (int i = 0; i < 4; ++i) p.on_demand(0);  // key 0: 1 + 1/√2 + 1/2 + 1/(2√2) ≈ 2.56 at its last use
  p.on_demand(1);                              // key 1: 1, one token later: key 0 ≈ 2.56 / √2 ≈ 1.81
  EXPECT_NEAR(p.score(0), (1 + std::exp2(-0.5) + 0.5 + std::exp2(-1.5)) * std::exp2(-0.5), 1e-12);
  EXPECT_DOUBLE_EQ(p.score(1), 1.0);
  p.add_candidate(0, 0);
  p.add_candidate(1, 1);
  EXPECT_EQ(p.victim(), 1);                    // the recent single use scores less than the old repeated ones
  for (int i = 0; i < 4; ++i) p.on_demand(2);  // four tokens later key 0 is down to ≈ 0.45, key 1 to 0.25
  p.remove_candidate(1);
  p.on_demand(1);  // key 1 used again: 1.25 now, beats key 0
  p.add_candidate(1, 1);
  EXPECT_EQ(p.victim(), 0);
  // The order is the score order, and stays so as time passes (ranks do not move while waiting).
  EXPECT_LT(p.score(0), p.score(1));
  EXPECT_EQ(p.victim_if(SlotFilter{nullptr, [](const void*, int s) { return s == 1; }}, 4), 1);
}

TEST(StreamPolicy, CrfClocksRunPerLayer) {
  // Two layers of 4 experts, top-1: accesses to layer 1 do not age layer 0's scores.
  CrfPolicy p(4, 8, ClockShape{4, 1}, 1.0);
  p.on_demand(0);
  for (int i = 0; i < 10; ++i) p.on_demand(5);
  EXPECT_DOUBLE_EQ(p.score(0), 1.0);
  p.on_demand(1);
  EXPECT_DOUBLE_EQ(p.score(0), 0.5);
}

TEST(StreamPolicy, GateLruPutsFirstUsesOnProbationAndRepeatsInTheWorkingSet) {
  // One layer of 16 experts, top-1, window 3 tokens.
  GateLruPolicy p(4, 16, ClockShape{16, 1}, 3);
  const auto use = [&](int slot, int key, bool admit) {
    if (admit) p.on_admit(slot, key);
    p.on_demand(key);
    p.add_candidate(slot, key);
  };
  use(0, 5, true);           // first use: probation
  use(1, 6, true);           // first use: probation
  p.remove_candidate(0);     // slot 0 evicted ...
  use(0, 5, true);           // ... and key 5 missed again within 3 tokens of its last use: admitted as recent
  use(3, 7, true);           // probation
  EXPECT_EQ(p.victim(), 1);  // the oldest on probation
  p.remove_candidate(1);
  EXPECT_EQ(p.victim(), 3);
  p.remove_candidate(3);
  EXPECT_EQ(p.victim(), 0);  // only the working set is left
  // A reuse while cached (released again without a new admission) joins the working set too.
  use(1, 9, true);
  p.remove_candidate(1);
  p.on_demand(9);
  p.add_candidate(1, 9);
  EXPECT_EQ(p.victim(), 0);  // slot 0 joined the working set first
  // A miss long after the last use is a first use again.
  for (int i = 0; i < 5; ++i) p.on_demand(12);
  p.remove_candidate(0);
  use(0, 5, true);
  EXPECT_EQ(p.victim(), 0);
}

TEST(StreamPolicy, SlruEvictsSingleUsesBeforeRepeatedOnesAndCapsTheProtectedSegment) {
  SlruPolicy p(4, 50);  // at most 2 protected
  const auto admit_and_release = [&](int slot) {
    p.on_admit(slot, slot);
    p.on_demand(slot);
    p.add_candidate(slot, slot);
  };
  const auto reuse = [&](int slot) {
    p.remove_candidate(slot);
    p.on_demand(slot);
    p.add_candidate(slot, slot);
  };
  for (int s = 0; s < 4; ++s) admit_and_release(s);
  reuse(0);
  reuse(1);
  EXPECT_EQ(drain(p), (std::vector<int>{2, 3, 0, 1}));
  for (int s = 0; s < 4; ++s) admit_and_release(s);
  reuse(0);
  reuse(1);
  reuse(2);  // a third protected one pushes the oldest (0) back to probation, behind 3
  EXPECT_EQ(drain(p), (std::vector<int>{3, 0, 1, 2}));
}

TEST(StreamPolicy, SlotListsMoveSlotsBetweenLists) {
  SlotLists l(5, 2);
  for (int s = 0; s < 5; ++s) l.push_back(0, s);
  l.push_back(1, 2);
  l.push_back(1, 0);
  EXPECT_EQ(l.size(0), 3);
  EXPECT_EQ(l.size(1), 2);
  EXPECT_EQ(l.owner(2), 1);
  EXPECT_EQ(l.pop_front(1), 2);
  EXPECT_EQ(l.owner(2), SlotLists::kNone);
  l.remove(3);
  std::vector<int> rest;
  for (int s = l.front(0); s != SlotLists::kNone; s = l.next(s)) rest.push_back(s);
  EXPECT_EQ(rest, (std::vector<int>{1, 4}));
  EXPECT_EQ(l.pop_front(1), 0);
  EXPECT_TRUE(l.empty(1));
  EXPECT_EQ(l.pop_front(1), SlotLists::kNone);
}

TEST(StreamPolicy, ShadowCacheAnswersHitsAndHoldsTheLastAccessesFromEviction) {
  // One layer of 64 experts, top-1: every access is a token; CRF with a long half-life keeps key 0, used
  // three times, over the single uses of keys 1 and 2.
  auto run = [](int held) {
    ShadowCache shadow(std::make_unique<CrfPolicy>(3, 64, ClockShape{64, 1}, 1000.0), 3, 64, held);
    std::vector<bool> hits;
    for (int key : {0, 0, 0, 1, 2, 3, 1}) hits.push_back(shadow.access(key));
    return hits;
  };
  // Nothing held: key 3 takes the slot of the older single use (key 1), which then misses.
  EXPECT_EQ(run(0), (std::vector<bool>{false, true, true, false, false, false, false}));
  // The last two accesses (keys 1 and 2) held, as a layer's top-k is pinned: key 3 can only take key 0's
  // slot.
  EXPECT_EQ(run(2), (std::vector<bool>{false, true, true, false, false, false, true}));
  // More held than the slots allow: one slot is always left to take.
  ShadowCache tiny(std::make_unique<LruPolicy>(1), 1, 8, 4);
  EXPECT_FALSE(tiny.access(1));
  EXPECT_TRUE(tiny.access(1));
  EXPECT_FALSE(tiny.access(2));
  EXPECT_FALSE(tiny.access(1));
}

// Drives a policy as the cache does, over `n_slots` slots holding keys (no pins kept across accesses).
struct MiniCache {
  MiniCache(EvictionPolicy& p, int n_slots) : policy(p), key_of(static_cast<size_t>(n_slots), -1) {}
  bool access(int key) {
    auto it = std::find(key_of.begin(), key_of.end(), key);
    int slot = static_cast<int>(it - key_of.begin());
    const bool hit = it != key_of.end();
    if (!hit) {
      it = std::find(key_of.begin(), key_of.end(), -1);
      slot = it != key_of.end() ? static_cast<int>(it - key_of.begin()) : policy.victim();
      policy.remove_candidate(slot);
      key_of[static_cast<size_t>(slot)] = key;
      policy.on_admit(slot, key);
    } else {
      policy.remove_candidate(slot);
    }
    policy.on_demand(key);
    policy.add_candidate(slot, key);
    return hit;
  }
  EvictionPolicy& policy;
  std::vector<int> key_of;
};

TEST(StreamPolicy, AdaptiveFollowsTheOrderOfTheContenderWhoseShadowHitMore) {
  constexpr int kSlots = 4, kKeys = 256;
  const ClockShape clock{kKeys, 1};
  const PolicyOptions options{.crf_half_life_tokens = 1000, .n_expert = kKeys, .top_k = 1};
  AdaptivePolicy adaptive({PolicyKind::kLru, PolicyKind::kCrf}, kSlots, kKeys, options, 1, 16);
  // The contenders on their own, fed the same events: the adaptive victim must be the leader's.
  LruPolicy lru(kSlots);
  CrfPolicy crf(kSlots, kKeys, clock, 1000);
  struct Tee final : EvictionPolicy {
    std::vector<EvictionPolicy*> all;
    const char* name() const override { return "tee"; }
    void on_demand(int key) override {
      for (auto* p : all) p->on_demand(key);
    }
    void on_admit(int slot, int key) override {
      for (auto* p : all) p->on_admit(slot, key);
    }
    void add_candidate(int slot, int key) override {
      for (auto* p : all) p->add_candidate(slot, key);
    }
    void remove_candidate(int slot) override {
      for (auto* p : all) p->remove_candidate(slot);
    }
    int victim() const override { return all[0]->victim(); }
    int victim_if(const SlotFilter& f, int n) const override { return all[0]->victim_if(f, n); }
    uint64_t memory_bytes() const override { return 0; }
  } tee;
  tee.all = {&adaptive, &lru, &crf};
  MiniCache cache(tee, kSlots);
  auto expect_victim_of = [&](const char* leader) {
    ASSERT_STREQ(adaptive.leader(), leader);
    EXPECT_EQ(adaptive.victim(), std::string(leader) == "lru" ? lru.victim() : crf.victim());
  };

  // Phase 1, frequency pays: key 0 comes back after four one-off keys, which LRU's four slots cannot span
  // and CRF's count keeps. Only the CRF shadow hits.
  int one_off = 100;
  for (int round = 0; round < 12; ++round) {
    cache.access(0);
    for (int i = 0; i < 4; ++i) cache.access(one_off++);
  }
  EXPECT_GT(adaptive.weighted_hits(1), adaptive.weighted_hits(0));
  expect_victim_of("crf");
  EXPECT_TRUE(cache.access(0));  // the real cache, following CRF's order, kept it too

  // Phase 2, recency pays: a new working set of four keys in turn. CRF still ranks key 0's old uses above
  // the newcomers and misses them; LRU keeps all four.
  for (int round = 0; round < 12; ++round)
    for (int key : {10, 11, 12, 13}) cache.access(key);
  EXPECT_GT(adaptive.weighted_hits(0), adaptive.weighted_hits(1));
  expect_victim_of("lru");
  // The victims really follow LRU now: the working set stays, so it hits.
  int hits = 0;
  for (int key : {10, 11, 12, 13}) hits += cache.access(key);
  EXPECT_EQ(hits, 4);
  EXPECT_GT(adaptive.memory_bytes(), lru.memory_bytes() + crf.memory_bytes());
}

}  // namespace
}  // namespace df::stream

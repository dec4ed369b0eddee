// Eviction orders of the policies on their own, and the fixed-capacity lists under them.
#include <gtest/gtest.h>

#include "stream/eviction_policy.h"
#include "stream/lfu_aging_policy.h"
#include "stream/slot_lists.h"
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
  EXPECT_THROW(parse_policy("fifo"), Error);
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

}  // namespace
}  // namespace df::stream

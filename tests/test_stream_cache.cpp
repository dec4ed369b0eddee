// The expert cache returns exactly the store's bytes for every budget, policy, read-ahead depth, I/O mode and
// reader, and keeps its promises about pinning, priorities and the order of eviction.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "stream/expert_cache.h"
#include "test_stream_fixture.h"
#include "util/error.h"

namespace df::stream {
namespace {

using testing::make_store;
using testing::SyntheticStore;

constexpr int kLayers = 4, kExperts = 8, kTopK = 2, kTokens = 12;

struct RunConfig {
  uint64_t slots;
  PolicyKind policy;
  int lookahead;
  IoMode io;
  ReaderKind reader;
  std::string name() const {
    return fmt::format("slots={} policy={} lookahead={} io={} reader={}", slots, policy_name(policy),
                       lookahead, io == IoMode::kDirect ? "direct" : "buffered",
                       reader == ReaderKind::kPread ? "pread" : "uring");
  }
};

ExpertCacheOptions options_for(const RunConfig& c, std::vector<std::string>* notices = nullptr) {
  ExpertCacheOptions o;
  o.slots = c.slots;
  o.min_slots = kTopK;
  o.policy = c.policy;
  o.io = c.io;
  o.reader = c.reader;
  o.queue_depth = 4;
  o.pread_threads = 2;
  o.notice = [notices](const std::string& line) {
    if (notices) notices->push_back(line);
  };
  return o;
}

// The router's choices per token and layer: k distinct experts, mostly from a hot few, so caching matters.
std::vector<int32_t> routed(int token, int layer, uint64_t seed) {
  uint64_t state = seed * 1000003 + static_cast<uint64_t>(token * 131 + layer);
  std::vector<int32_t> ids;
  while (static_cast<int>(ids.size()) < kTopK) {
    const uint64_t r = testing::splitmix64(state);
    const int32_t e = static_cast<int32_t>(r % 10 < 6 ? (r >> 8) % 3 : (r >> 8) % kExperts);
    if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
  }
  return ids;
}

// A read-ahead guess: the real choice with one expert swapped for another, as a router on a stale state
// would.
std::vector<int32_t> guessed(int token, int layer, uint64_t seed) {
  std::vector<int32_t> ids = routed(token, layer, seed);
  ids[static_cast<size_t>(token % kTopK)] = static_cast<int32_t>((token * 5 + layer) % kExperts);
  return ids;
}

// Decodes kTokens tokens through the cache and checks every record it hands out, byte for byte.
void decode_and_check(const SyntheticStore& store, const RunConfig& c) {
  ExpertCache cache(store.source, options_for(c));
  std::vector<ExpertHandle> handles(kTopK);
  for (int t = 0; t < kTokens; ++t) {
    for (int l = 0; l < kLayers; ++l) {
      for (int d = 1; d <= c.lookahead && l + d < kLayers; ++d) {
        const auto guess = guessed(t, l + d, 7);
        cache.prefetch(l + d, guess);
      }
      const auto ids = routed(t, l, 7);
      cache.acquire(l, ids, handles);
      // Alternate the order in which records are awaited, as a model computing on whatever landed first
      // would.
      for (int i = 0; i < kTopK; ++i) {
        const int j = t % 2 ? kTopK - 1 - i : i;
        const uint8_t* got = cache.wait(handles[static_cast<size_t>(j)]);
        ASSERT_TRUE(store.matches(l, ids[static_cast<size_t>(j)], got))
            << c.name() << " token " << t << " layer " << l << " expert " << ids[static_cast<size_t>(j)];
      }
      cache.release(handles);
    }
  }
  const TelemetrySnapshot s = cache.telemetry();
  EXPECT_EQ(s.total.accesses, static_cast<uint64_t>(kTokens * kLayers * kTopK)) << c.name();
  EXPECT_EQ(s.total.read_failures, 0u) << c.name();
  if (c.slots >=
      static_cast<uint64_t>(kLayers * kExperts)) {  // everything fits: each record read at most once
    EXPECT_LE(s.total.reads, static_cast<uint64_t>(kLayers * kExperts)) << c.name();
  }
}

TEST(StreamCache, EveryConfigurationReturnsTheStoreBytes) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  const uint64_t all = kLayers * kExperts;
  for (uint64_t slots : {uint64_t{kTopK}, uint64_t{kTopK + 1}, uint64_t{kTopK + 3}, all / 2, all - 1, all})
    for (PolicyKind policy : {PolicyKind::kLru, PolicyKind::kLfuAging})
      for (int lookahead : {0, 1, 2})
        for (IoMode io : {IoMode::kDirect, IoMode::kBuffered})
          for (ReaderKind reader : {ReaderKind::kUring, ReaderKind::kPread})
            decode_and_check(store, RunConfig{slots, policy, lookahead, io, reader});
}

TEST(StreamCache, EveryBudgetFromTheMinimumToAllResident) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts, 3);
  for (uint64_t slots = kTopK; slots <= kLayers * kExperts + 2; ++slots) {
    decode_and_check(store, RunConfig{slots, PolicyKind::kLru, 1, IoMode::kDirect, ReaderKind::kUring});
    decode_and_check(store,
                     RunConfig{slots, PolicyKind::kLfuAging, 2, IoMode::kBuffered, ReaderKind::kPread});
  }
}

TEST(StreamCache, BudgetBelowOneLayerIsRefused) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  RunConfig c{kTopK - 1, PolicyKind::kLru, 0, IoMode::kBuffered, ReaderKind::kPread};
  try {
    ExpertCache cache(store.source, options_for(c));
    FAIL() << "a budget of one slot for top-2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("minimum budget is 16.0 KiB"), std::string::npos) << e.what();
  }
}

TEST(StreamCache, PinnedSlotsAreNeverEvicted) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  for (ReaderKind reader : {ReaderKind::kUring, ReaderKind::kPread}) {
    ExpertCache cache(store.source, options_for({kTopK, PolicyKind::kLru, 1, IoMode::kDirect, reader}));
    std::vector<ExpertHandle> h(2);
    const std::vector<int32_t> ids = {5, 6};
    cache.acquire(0, ids, h);
    const std::vector<int32_t> guesses = {1, 2};
    cache.prefetch(1, guesses);  // no slot may be taken: both are pinned; must not block
    EXPECT_THROW(cache.acquire(0, 7), Error);
    EXPECT_TRUE(store.matches(0, 5, cache.wait(h[0])));
    EXPECT_TRUE(store.matches(0, 6, cache.wait(h[1])));
    cache.drain();
    EXPECT_TRUE(cache.resident(0, 5));
    EXPECT_TRUE(cache.resident(0, 6));
    EXPECT_FALSE(cache.resident(1, 1));
    EXPECT_EQ(cache.telemetry().layers[1].prefetch_dropped, 2u);
    cache.release(h);
    const std::vector<int32_t> next = {1, 2};
    cache.acquire(1, next, h);
    EXPECT_TRUE(store.matches(1, 1, cache.wait(h[0])));
    EXPECT_TRUE(store.matches(1, 2, cache.wait(h[1])));
    cache.release(h);
  }
}

// Blocks the reader on its first read until the test opens the gate, recording the order reads start in.
struct ReadGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::vector<std::tuple<int, int, bool>> order;

  void install(FaultPlan& plan) {
    plan.on_read_start = [this](const ReadJob& job) {
      std::unique_lock lock(mu);
      order.emplace_back(job.layer, job.expert, job.guess);
      cv.notify_all();
      cv.wait(lock, [&] { return open; });
    };
  }
  void wait_started(size_t n) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return order.size() >= n; });
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(StreamCache, DemandReadsGoBeforeQueuedGuesses) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  for (ReaderKind reader : {ReaderKind::kUring, ReaderKind::kPread}) {
    ReadGate gate;
    ExpertCacheOptions o = options_for({16, PolicyKind::kLru, 1, IoMode::kDirect, reader});
    o.queue_depth = 1;
    o.pread_threads = 1;
    gate.install(o.faults);
    ExpertCache cache(store.source, o);
    cache.prefetch(1, std::vector<int32_t>{0});
    gate.wait_started(1);  // the reader is now stuck in the first guess
    cache.prefetch(1, std::vector<int32_t>{1, 2, 3});
    std::vector<ExpertHandle> h(2);
    cache.acquire(0, std::vector<int32_t>{4, 5}, h);
    const ExpertHandle promoted = cache.acquire(1, 3);  // a queued guess that is now demanded
    gate.release();
    for (const auto& x : h) EXPECT_TRUE(store.matches(0, x.expert, cache.wait(x)));
    EXPECT_TRUE(store.matches(1, 3, cache.wait(promoted)));
    cache.drain();
    const std::vector<std::tuple<int, int, bool>> want = {{1, 0, true},  {0, 4, false}, {0, 5, false},
                                                          {1, 3, false}, {1, 1, true},  {1, 2, true}};
    EXPECT_EQ(gate.order, want) << (reader == ReaderKind::kPread ? "pread" : "uring");
    EXPECT_EQ(cache.telemetry().layers[1].prefetch_hits, 1u);
  }
}

TEST(StreamCache, WrongGuessesAreEvictedFirstPendingOnesLast) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  ExpertCache cache(store.source, options_for({5, PolicyKind::kLru, 1, IoMode::kDirect, ReaderKind::kUring}));
  auto use = [&](int layer, int expert) {
    const ExpertHandle h = cache.acquire(layer, expert);
    EXPECT_TRUE(store.matches(layer, expert, cache.wait(h)));
    cache.release(h);
  };
  use(0, 0);
  use(0, 1);
  cache.prefetch(1, std::vector<int32_t>{0, 1});
  cache.prefetch(2, std::vector<int32_t>{0});
  cache.drain();  // full: (0,0) (0,1) plain; (1,0) (1,1) (2,0) guesses
  use(1, 1);      // a guess used
  use(2, 2);      // layer 1 is over: its unused guess (1,0) was wrong and goes first
  EXPECT_FALSE(cache.resident(1, 0));
  EXPECT_TRUE(cache.resident(2, 0));
  EXPECT_TRUE(cache.resident(0, 0));
  use(2, 3);  // no wrong guess left: the policy's victim (0,0), used longest ago; the guess for layer 2 stays
  EXPECT_FALSE(cache.resident(0, 0));
  EXPECT_TRUE(cache.resident(0, 1));
  EXPECT_TRUE(cache.resident(2, 0));
  EXPECT_TRUE(cache.resident(1, 1));
}

TEST(StreamCache, PendingGuessesMakeRoomWhenNothingElseCan) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  ExpertCache cache(store.source, options_for({3, PolicyKind::kLru, 1, IoMode::kDirect, ReaderKind::kUring}));
  cache.prefetch(1, std::vector<int32_t>{0, 1});
  cache.drain();
  std::vector<ExpertHandle> h(2);
  cache.acquire(0, std::vector<int32_t>{2, 3}, h);  // one free slot, then the oldest guess
  for (const auto& x : h) EXPECT_TRUE(store.matches(0, x.expert, cache.wait(x)));
  EXPECT_FALSE(cache.resident(1, 0));
  EXPECT_TRUE(cache.resident(1, 1));
  cache.release(h);
}

TEST(StreamCache, GuessesNeverEvictPendingGuesses) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  ExpertCache cache(store.source,
                    options_for({3, PolicyKind::kLru, 1, IoMode::kBuffered, ReaderKind::kUring}));
  cache.prefetch(1, std::vector<int32_t>{0, 1, 2});
  cache.prefetch(1, std::vector<int32_t>{3});
  cache.drain();
  for (int e = 0; e < 3; ++e) EXPECT_TRUE(cache.resident(1, e));
  EXPECT_FALSE(cache.resident(1, 3));
  const TelemetrySnapshot s = cache.telemetry();
  EXPECT_EQ(s.layers[1].prefetch_issued, 3u);
  EXPECT_EQ(s.layers[1].prefetch_dropped, 1u);
}

TEST(StreamCache, GuessesSpareTheLayersAheadOfThem) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  for (PolicyKind policy : {PolicyKind::kLru, PolicyKind::kLfuAging}) {
    ExpertCache cache(store.source, options_for({4, policy, 1, IoMode::kDirect, ReaderKind::kUring}));
    for (int l : {1, 2, 3, 0}) {  // one record per layer; demand is now at layer 0
      const ExpertHandle h = cache.acquire(l, 0);
      cache.wait(h);
      cache.release(h);
    }
    // A guess for layer 2 must not take (1,0) or (2,0), the oldest records: layers 1 and 2 come before it.
    cache.prefetch(2, std::vector<int32_t>{5});
    cache.drain();
    EXPECT_TRUE(cache.resident(2, 5)) << policy_name(policy);
    EXPECT_TRUE(cache.resident(1, 0)) << policy_name(policy);
    EXPECT_TRUE(cache.resident(2, 0)) << policy_name(policy);
    EXPECT_FALSE(cache.resident(3, 0)) << policy_name(policy);
    EXPECT_TRUE(cache.resident(0, 0)) << policy_name(policy);
    // A guess for layer 1 spares only layer 1: the oldest record it may take is (2,0), needed after layer 1.
    cache.prefetch(1, std::vector<int32_t>{6});
    cache.drain();
    EXPECT_TRUE(cache.resident(1, 6)) << policy_name(policy);
    EXPECT_TRUE(cache.resident(1, 0)) << policy_name(policy);
    EXPECT_FALSE(cache.resident(2, 0)) << policy_name(policy);
    EXPECT_TRUE(cache.resident(2, 5)) << policy_name(policy);  // a pending guess: never a guess's victim
  }
}

TEST(StreamCache, LfuKeepsTheFrequentRecord) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  ExpertCache cache(store.source,
                    options_for({3, PolicyKind::kLfuAging, 0, IoMode::kDirect, ReaderKind::kUring}));
  auto use = [&](int expert) {
    const ExpertHandle h = cache.acquire(0, expert);
    EXPECT_TRUE(store.matches(0, expert, cache.wait(h)));
    cache.release(h);
  };
  for (int e : {0, 0, 0, 1, 2, 2}) use(e);
  use(3);  // (0,1) was used once: it goes, although (0,0) was used longest ago
  EXPECT_TRUE(cache.resident(0, 0));
  EXPECT_FALSE(cache.resident(0, 1));
  EXPECT_TRUE(cache.resident(0, 2));
}

TEST(StreamCache, ManyThreadsAtOnce) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  for (ReaderKind reader : {ReaderKind::kUring, ReaderKind::kPread}) {
    ExpertCache cache(store.source,
                      options_for({kLayers * kTopK + 3, PolicyKind::kLru, 1, IoMode::kDirect, reader}));
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int layer = 0; layer < kLayers; ++layer) {
      threads.emplace_back([&, layer] {
        std::vector<ExpertHandle> h(kTopK);
        for (int t = 0; t < 40; ++t) {
          cache.prefetch((layer + 1) % kLayers, guessed(t, (layer + 1) % kLayers, 11));
          const auto ids = routed(t, layer, 11);
          cache.acquire(layer, ids, h);
          for (int i = 0; i < kTopK; ++i)
            if (!store.matches(layer, ids[static_cast<size_t>(i)], cache.wait(h[static_cast<size_t>(i)])))
              ++bad;
          cache.release(h);
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(cache.telemetry().total.accesses, static_cast<uint64_t>(kLayers * 40 * kTopK));
  }
}

TEST(StreamCache, ReleasingWhatIsNotAcquiredIsAnError) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  ExpertCache cache(store.source, options_for({4, PolicyKind::kLru, 0, IoMode::kDirect, ReaderKind::kUring}));
  const ExpertHandle h = cache.acquire(0, 1);
  cache.wait(h);
  cache.release(h);
  EXPECT_THROW(cache.release(h), Error);
  EXPECT_THROW(cache.wait(h), Error);
  EXPECT_THROW(cache.acquire(0, kExperts), Error);
  EXPECT_THROW(cache.acquire(kLayers, 0), Error);
  EXPECT_THROW(cache.prefetch(1, std::vector<int32_t>{-1}), Error);
}

TEST(StreamCache, DescribesItsChoices) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  ExpertCache cache(store.source,
                    options_for({6, PolicyKind::kLfuAging, 0, IoMode::kDirect, ReaderKind::kUring}));
  EXPECT_EQ(cache.slots(), 6u);
  EXPECT_EQ(cache.pool_bytes(), 6 * store.record_bytes());
  EXPECT_LT(cache.overhead_bytes(), 64u * 1024);
  const std::string d = cache.describe();
  EXPECT_NE(d.find("6 slots x 8.00 KiB = 48.0 KiB, lfu-aging, io_uring"), std::string::npos) << d;
  EXPECT_NE(d.find("O_DIRECT"), std::string::npos) << d;
}

}  // namespace
}  // namespace df::stream

// The per-token path of the cache (acquire, wait, release, prefetch, and the reader behind them) allocates
// nothing once the cache is built: every new/delete in this program is counted.
#include <atomic>
#include <cstdlib>
#include <new>

#include "counting_operator_new.h"
#include "stream/expert_cache.h"
#include "test_stream_fixture.h"

namespace df::stream {
namespace {

TEST(StreamNoAlloc, SteadyStateDecodeAllocatesNothing) {
  const testing::SyntheticStore store = testing::make_store(testing::fresh_dir(), 4, 8);
  for (ReaderKind reader : {ReaderKind::kUring, ReaderKind::kPread}) {
    for (PolicyKind policy : {PolicyKind::kLru, PolicyKind::kLfuAging}) {
      ExpertCacheOptions o;
      o.slots = 6;  // small: evictions, guesses dropped and cancelled, waits for reads
      o.min_slots = 2;
      o.reader = reader;
      o.policy = policy;
      o.notice = [](const std::string&) {};
      const uint64_t at_start = g_allocations.load();
      ExpertCache cache(store.source, o);
      ASSERT_GT(g_allocations.load(), at_start) << "the counter does not see allocations";
      std::vector<ExpertHandle> h(2);
      std::vector<int32_t> ids(2), guess(2);
      auto step = [&](int t) {
        for (int l = 0; l < 4; ++l) {
          guess[0] = (t + l + 1) % 8;
          guess[1] = (t * 3 + l) % 8;
          if (l + 1 < 4) cache.prefetch(l + 1, guess);
          ids[0] = (t + l) % 8;
          ids[1] = (t * 3 + l + 1) % 8;
          if (ids[1] == ids[0]) ids[1] = (ids[0] + 1) % 8;
          cache.acquire(l, ids, h);
          for (const auto& x : h) ASSERT_TRUE(store.matches(l, x.expert, cache.wait(x)));
          cache.release(h);
        }
      };
      for (int t = 0; t < 4; ++t) step(t);  // warm up (thread-local state of the C++ runtime, if any)
      const uint64_t before = g_allocations.load();
      for (int t = 4; t < 40; ++t) step(t);
      cache.drain();
      EXPECT_EQ(g_allocations.load() - before, 0u) << "allocations on the per-token path";
    }
  }
}

}  // namespace
}  // namespace df::stream

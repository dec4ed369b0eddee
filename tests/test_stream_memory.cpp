// Peak memory under a budget: streaming a store several times larger than the cache grows the process by the
// slot pool plus the stated bookkeeping overhead and a little for threads and the ring, never by the store
// size.
#include <fstream>

#include "stream/expert_cache.h"
#include "test_stream_fixture.h"

namespace df::stream {
namespace {

[[maybe_unused]] uint64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(std::string(key).size()));
  return 0;
}

// Reader threads' stacks, the io_uring rings, allocator arenas and the test's own vectors: 2 MiB on 4 KiB
// pages. With transparent huge pages in "always" mode any of the reader threads' stacks and malloc arenas
// (and the caller's) may be backed by a 2 MiB page as soon as it is touched, so allow two such pages per
// thread there.
[[maybe_unused]] uint64_t slack_bytes(int reader_threads) {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(in, mode);
  const bool always = mode.find("[always]") != std::string::npos;
  return (uint64_t{2} << 20) + (always ? static_cast<uint64_t>(reader_threads + 1) * (uint64_t{4} << 20) : 0);
}

TEST(StreamMemory, PeakRssStaysWithinTheBudgetPlusOverhead) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer shadow memory inflates RSS";
#else
  constexpr int kLayers = 4, kExperts = 48;
  // Records of 768 KiB: 144 MiB of experts through an 8-slot (6 MiB) cache.
  const testing::SyntheticStore store =
      testing::make_store(testing::fresh_dir(), kLayers, kExperts, 5, 256, 256);
  for (IoMode io : {IoMode::kDirect, IoMode::kBuffered}) {
    const bool peak_reset = static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5");
    const uint64_t before = status_kib("VmRSS:") * 1024;
    uint64_t bound = 0;
    {
      ExpertCacheOptions o;
      o.slots = 8;
      o.min_slots = 2;
      o.io = io;
      o.notice = [](const std::string&) {};
      ExpertCache cache(store.source, o);
      bound = cache.pool_bytes() + cache.overhead_bytes() + slack_bytes(o.pread_threads);
      std::vector<ExpertHandle> h(2);
      for (int round = 0; round < 2; ++round)
        for (int l = 0; l < kLayers; ++l)
          for (int e = 0; e + 1 < kExperts; e += 2) {
            cache.prefetch((l + 1) % kLayers, std::vector<int32_t>{e, e + 1});
            cache.acquire(l, std::vector<int32_t>{e, e + 1}, h);
            for (const auto& x : h) ASSERT_TRUE(store.matches(l, x.expert, cache.wait(x)));
            cache.release(h);
          }
      cache.drain();
      const uint64_t now = status_kib(peak_reset ? "VmHWM:" : "VmRSS:") * 1024;
      EXPECT_LE(now - std::min(now, before), bound)
          << "grew by " << (now - before) << " bytes; pool " << cache.pool_bytes() << ", overhead "
          << cache.overhead_bytes();
      EXPECT_LT(bound, store.bytes.size() / 2);  // the check means something: far below the store size
    }
  }
#endif
}

}  // namespace
}  // namespace df::stream

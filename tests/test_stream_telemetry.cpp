// Telemetry counts exactly what a scripted access pattern does, and formats as a table and as JSON.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "stream/expert_cache.h"
#include "stream/telemetry_json.h"
#include "test_stream_fixture.h"

namespace df::stream {
namespace {

using testing::make_store;
using testing::SyntheticStore;

void use(ExpertCache& cache, const SyntheticStore& store, int layer, std::vector<int32_t> ids) {
  std::vector<ExpertHandle> h(ids.size());
  cache.acquire(layer, ids, h);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_TRUE(store.matches(layer, ids[i], cache.wait(h[i])));
  cache.release(h);
}

// Time comes from a clock the test moves: it stands still except while the one read of MoE layer 2 is held,
// which the test lets go only once the caller is blocked in wait() (the clock's first read on the caller's
// thread after arming), and which then takes exactly 20 ms of that clock. So every timed figure is exact.
class SteppedClock {
 public:
  uint64_t now() {
    std::lock_guard lock(mu_);
    if (armed_ && std::this_thread::get_id() == caller_) {
      armed_ = false;
      open_ = true;
      cv_.notify_all();
    }
    return ns_;
  }
  void arm() {
    std::lock_guard lock(mu_);
    armed_ = true;
    open_ = false;
  }
  // The reader thread: waits until the caller waits, then spends `ns` of clock time on the read.
  void hold_read(uint64_t ns) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
    ns_ += ns;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const std::thread::id caller_ = std::this_thread::get_id();
  uint64_t ns_ = 1'000'000'000;
  bool armed_ = false, open_ = true;
};

TEST(StreamTelemetry, CountsAScriptedPatternExactly) {
  const SyntheticStore store = make_store(testing::fresh_dir(), 3, 6);
  const uint64_t rb = store.record_bytes();
  constexpr uint64_t kReadNs = 20'000'000;
  for (ReaderKind reader : {ReaderKind::kUring, ReaderKind::kPread}) {
    SteppedClock clock;
    ExpertCacheOptions o;
    o.slots = 4;
    o.min_slots = 2;
    o.reader = reader;
    o.notice = [](const std::string&) {};
    o.clock_ns = [&clock] { return clock.now(); };
    o.faults.on_read_start = [&clock](const ReadJob& job) {
      if (job.layer == 2) clock.hold_read(kReadNs);
    };
    ExpertCache cache(store.source, o);
    use(cache, store, 0, {0, 1});                   // 2 misses
    use(cache, store, 0, {0, 2});                   // 1 hit, 1 miss
    cache.prefetch(1, std::vector<int32_t>{3, 4});  // one free slot, then the LRU victim (0,1)
    cache.drain();
    use(cache, store, 1, {3, 5});  // a hit on a guess; the miss takes the LRU victim (0,0)
    clock.arm();
    use(cache, store, 2, {0});  // a miss: layer 1 is over, so its unused guess (1,4) goes
    cache.record_step(3, 100'000'000);

    EXPECT_FALSE(cache.resident(0, 0));
    EXPECT_FALSE(cache.resident(0, 1));
    EXPECT_TRUE(cache.resident(0, 2));
    EXPECT_TRUE(cache.resident(1, 3));
    EXPECT_FALSE(cache.resident(1, 4));
    EXPECT_TRUE(cache.resident(1, 5));
    EXPECT_TRUE(cache.resident(2, 0));

    const TelemetrySnapshot s = cache.telemetry();
    ASSERT_EQ(s.layers.size(), 3u);
    const LayerCounters& l0 = s.layers[0];
    EXPECT_EQ(l0.accesses, 4u);
    EXPECT_EQ(l0.hits, 1u);
    EXPECT_EQ(l0.misses, 3u);
    EXPECT_EQ(l0.reads, 3u);
    EXPECT_EQ(l0.bytes_read, 3 * rb);
    EXPECT_EQ(l0.prefetch_issued, 0u);
    const LayerCounters& l1 = s.layers[1];
    EXPECT_EQ(l1.accesses, 2u);
    EXPECT_EQ(l1.hits, 1u);
    EXPECT_EQ(l1.misses, 1u);
    EXPECT_EQ(l1.prefetch_issued, 2u);
    EXPECT_EQ(l1.prefetch_hits, 1u);
    EXPECT_EQ(l1.reads, 3u);
    const LayerCounters& l2 = s.layers[2];
    EXPECT_EQ(l2.accesses, 1u);
    EXPECT_EQ(l2.misses, 1u);
    EXPECT_EQ(l2.wait_ns, kReadNs);
    EXPECT_EQ(l2.read_ns, kReadNs);
    EXPECT_EQ(l0.wait_ns + l1.wait_ns + l0.read_ns + l1.read_ns, 0u);  // the clock stood still for them

    EXPECT_EQ(s.total.accesses, 7u);
    EXPECT_EQ(s.total.hits, 2u);
    EXPECT_EQ(s.total.reads, 7u);
    EXPECT_EQ(s.total.bytes_read, 7 * rb);
    EXPECT_DOUBLE_EQ(s.hit_rate(), 2.0 / 7);
    EXPECT_DOUBLE_EQ(s.cache_hit_rate(), 1.0 / 7);  // one of the two hits was a guess's record
    EXPECT_DOUBLE_EQ(s.bytes_per_token(), 7.0 * static_cast<double>(rb) / 3);
    EXPECT_DOUBLE_EQ(s.prefetch_precision(), 0.5);
    EXPECT_DOUBLE_EQ(s.prefetch_recall(), 1.0 / 7);
    EXPECT_EQ(s.read_busy_ns, kReadNs);
    EXPECT_DOUBLE_EQ(s.io_wait_share(), 0.2);  // 20 ms of the 100 ms step
    EXPECT_DOUBLE_EQ(s.read_bandwidth(),
                     7.0 * static_cast<double>(rb) / (static_cast<double>(kReadNs) * 1e-9));

    const nlohmann::json j = telemetry_json(s);
    EXPECT_EQ(j["total"]["hits"], 2);
    EXPECT_EQ(j["layers"][1]["prefetch_hits"], 1);
    EXPECT_EQ(j["tokens"], 3);
    EXPECT_DOUBLE_EQ(j["prefetch_precision"].get<double>(), 0.5);
    EXPECT_DOUBLE_EQ(j["cache_hit_rate"].get<double>(), 1.0 / 7);

    const std::string table = format_telemetry_table(s);
    EXPECT_NE(table.find("hit rate 28.6% (14.3% held by the cache, the rest read ahead)"), std::string::npos)
        << table;
    EXPECT_NE(table.find("read-ahead precision 50.0% recall 14.3%"), std::string::npos) << table;
    EXPECT_NE(table.find("\n  all "), std::string::npos) << table;

    cache.reset_telemetry();
    const TelemetrySnapshot z = cache.telemetry();
    EXPECT_EQ(z.total.accesses, 0u);
    EXPECT_EQ(z.total.bytes_read, 0u);
    EXPECT_EQ(z.tokens, 0u);
  }
}

TEST(StreamTelemetry, CancelledAndDroppedGuessesAreCounted) {
  const SyntheticStore store = make_store(testing::fresh_dir(), 3, 6);
  ExpertCacheOptions o;
  o.slots = 3;
  o.min_slots = 2;
  o.reader = ReaderKind::kPread;
  o.pread_threads = 1;
  o.notice = [](const std::string&) {};
  std::mutex mu;
  std::condition_variable cv;
  bool open = false, started = false;
  o.faults.on_read_start = [&](const ReadJob&) {
    std::unique_lock lock(mu);
    started = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  };
  ExpertCache cache(store.source, o);
  const ExpertHandle first = cache.acquire(0, 0);
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return started; });  // the reader is held inside the read of (0,0)
  }
  cache.prefetch(1, std::vector<int32_t>{1, 2, 3});  // two queued, one dropped (no slot)
  const ExpertHandle h = cache.acquire(1, 5);        // layer 0 is over; the miss cancels a queued guess
  {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
  cache.wait(first);
  cache.wait(h);
  cache.release(first);
  cache.release(h);
  cache.drain();
  const TelemetrySnapshot s = cache.telemetry();
  EXPECT_EQ(s.layers[1].prefetch_issued, 2u);
  EXPECT_EQ(s.layers[1].prefetch_dropped, 1u);
  EXPECT_EQ(s.layers[1].prefetch_cancelled, 1u);
  EXPECT_EQ(s.total.reads, 3u);  // (0,0), (1,5) and the guess that stayed
}

}  // namespace
}  // namespace df::stream

// The CPU backend's thread pool: every task runs exactly once whatever the job size and timing (back-to-back
// jobs, workers asleep, more threads than cores), thread indices stay below size(), and an exception in a
// task reaches the caller. The dispatch cost is a benchmark (bench/thread_pool_bench.cpp), not a test.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "util/error.h"

namespace df::backend {
namespace {

TEST(ThreadPool, RunsEveryTaskOnceWithThreadIndicesBelowSize) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 100}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<bool> bad_thread{false};
      pool.run_tasks(n, [&](int thread, int64_t task) {
        if (thread < 0 || thread >= pool.size()) bad_thread = true;
        hits[static_cast<size_t>(task)]++;
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
      EXPECT_FALSE(bad_thread);
    }
  }
}

TEST(ThreadPool, ParallelPartsCoversEveryIndexOnceForAnySizeAndGrain) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 100, 1001}) {
    for (int64_t grain : {1, 4, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> max_thread{0}, short_slices{0};
      pool.parallel_parts(n, grain, [&](int thread, int64_t b, int64_t e) {
        int seen = max_thread.load();
        while (thread > seen && !max_thread.compare_exchange_weak(seen, thread)) {
        }
        if (e - b < grain && e != n) short_slices++;  // only the last slice may be shorter than the grain
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
      EXPECT_LT(max_thread.load(), pool.size());
      EXPECT_EQ(short_slices.load(), 0);
    }
  }
}

// Jobs posted back to back while workers are still finishing (or just waking for) the previous one: a late
// worker must never run a task of a finished job or miss one of the new job.
TEST(ThreadPool, BackToBackJobsNeverLoseOrRepeatATask) {
  ThreadPool pool(3);  // more threads than the CI machine has cores: workers get preempted mid-job
  std::vector<std::atomic<int>> hits(8);
  for (int job = 0; job < 4000; ++job) {
    const int64_t n = 1 + job % 8;
    for (auto& h : hits) h = 0;
    pool.run_tasks(n, [&](int, int64_t task) { hits[static_cast<size_t>(task)]++; });
    for (int64_t i = 0; i < 8; ++i)
      ASSERT_EQ(hits[static_cast<size_t>(i)].load(), i < n ? 1 : 0) << "job " << job << " task " << i;
  }
}

TEST(ThreadPool, SleepingWorkersWakeForTheNextJob) {
  ThreadPool pool(2);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the spin: the worker sleeps
    std::atomic<int64_t> sum{0};
    pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    EXPECT_EQ(sum.load(), 999 * 1000 / 2);
  }
}

TEST(ThreadPool, RethrowsAnExceptionFromATaskAndStaysUsable) {
  ThreadPool pool(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.run_tasks(10,
                              [&](int, int64_t task) {
                                ran++;
                                if (task == 7) fail("boom");
                              }),
               Error);
  EXPECT_EQ(ran.load(), 10);  // the other tasks still ran
  int64_t total = 0;
  pool.parallel_for(10, 100, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total, 10);
}

}  // namespace
}  // namespace df::backend

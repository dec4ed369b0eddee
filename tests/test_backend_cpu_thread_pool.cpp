// The CPU backend's thread pool: every task runs exactly once whatever the job size and timing (back-to-back
// jobs, workers asleep, more threads than cores), thread indices stay below size(), and an exception in a
// task reaches the caller. The dispatch cost is a benchmark (bench/thread_pool_bench.cpp), not a test.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "backend/cpu/gemm_tiling.h"
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

// A product's tasks cover every (weight row, token) once, in row blocks that start at multiples of the
// alignment; a tapered product with one token tile ends in shorter blocks than it starts with, and covers
// the same rows.
TEST(Tiling, TasksCoverEveryRowAndTokenOnceTaperedOrNot) {
  for (bool taper : {false, true})
    for (int64_t n_out : {int64_t{16}, int64_t{100}, int64_t{1536}, int64_t{2048}, int64_t{65536}})
      for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{200}})
        for (int64_t align : {int64_t{4}, int64_t{16}, int64_t{32}}) {
          const int64_t target = std::max<int64_t>(1, n_out * rows * 2048 / 64);
          const detail::Tiling t = detail::tile_product(n_out, rows, 2048, 1152, target, align, taper);
          std::vector<int> seen(static_cast<size_t>(n_out * rows), 0);
          int64_t first_len = 0, last_len = 0;
          for (int64_t task = 0; task < t.tasks(); ++task) {
            const int64_t r0 = t.row_begin(task), r1 = t.row_end(task);
            ASSERT_EQ(r0 % align, 0) << "task " << task;
            ASSERT_LT(r0, r1);
            if (task == 0) first_len = r1 - r0;
            last_len = r1 - r0;
            for (int64_t r = r0; r < r1; ++r)
              for (int64_t c = t.token_begin(task); c < t.token_end(task); ++c) ++seen[size_t(c * n_out + r)];
          }
          for (size_t i = 0; i < seen.size(); ++i)
            ASSERT_EQ(seen[i], 1) << "n_out " << n_out << " rows " << rows << " taper " << taper;
          if (taper && rows == 1 && n_out >= 1536 && align == 4) {
            EXPECT_LT(last_len, first_len) << n_out;
          }
        }
}

}  // namespace
}  // namespace df::backend

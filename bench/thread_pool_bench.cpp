// The CPU backend's thread pool hand-off: the cost of one two-task job whose tasks must run on both threads
// at once (each waits for the other to start), so every job is a real hand-off; with the worker spinning
// (jobs back to back, as within a decode step) and with it asleep (a job after a 1 ms pause). Burns both
// cores while it runs: never run it beside another benchmark.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "backend/cpu/thread_pool.h"

namespace {

struct HandOff {
  df::backend::ThreadPool pool{2};
  std::atomic<int64_t> arrived{0};
  int64_t jobs = 0;
  void one_job() {
    ++jobs;
    const int64_t target = 2 * jobs;
    pool.run_tasks(2, [&](int, int64_t) {
      arrived.fetch_add(1);
      while (arrived.load() < target) {
      }
    });
  }
};

void BM_HandOffBackToBack(benchmark::State& state) {
  HandOff h;
  h.one_job();
  for (auto _ : state) h.one_job();
  if (h.arrived.load() != 2 * h.jobs) state.SkipWithError("a task was lost");
}
BENCHMARK(BM_HandOffBackToBack)->Unit(benchmark::kMicrosecond);

void BM_HandOffAfterAPause(benchmark::State& state) {
  HandOff h;
  h.one_job();
  for (auto _ : state) {
    state.PauseTiming();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // past the spin: the worker sleeps
    state.ResumeTiming();
    h.one_job();
  }
  if (h.arrived.load() != 2 * h.jobs) state.SkipWithError("a task was lost");
}
BENCHMARK(BM_HandOffAfterAPause)->Unit(benchmark::kMicrosecond)->Iterations(200);

}  // namespace

BENCHMARK_MAIN();

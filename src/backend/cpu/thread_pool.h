#pragma once
// The CPU ops' thread pool: the calling thread plus n - 1 workers, never more threads than asked for.
//
// A job is a count of tasks; the caller and the workers claim them one at a time from a shared ticket, so a
// thread that is descheduled (the machine is shared) or slower simply takes fewer, and the job still ends
// as soon as its last task does. Between jobs a worker spins for a short while (pause instructions) before
// it sleeps on a futex; the caller likewise spins, then sleeps, while the last tasks finish. Decode runs
// dozens of small jobs per token, and a job posted while the workers spin starts in well under a
// microsecond instead of the tens of a condition variable wake-up.
//
// Jobs are passed by reference (no std::function, nothing allocated per call), so the decode path can run
// through the pool without touching the heap.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "util/op_profile.h"

namespace df::backend {

class ThreadPool {
 public:
  // n_threads <= 0 means one thread per hardware core. The caller of a job is thread 0.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread, task) once for every task in [0, n_tasks), spread over the pool; returns when all are
  // done. `thread` (0..size()-1) is unique among the threads running tasks at one time, so it can index
  // per-thread scratch; which thread runs which task is not fixed, so results must not depend on it. The
  // first exception thrown by a task is rethrown here (the other tasks still run). Not reentrant: fn must
  // not call back into the pool.
  template <typename Fn>
  void run_tasks(int64_t n_tasks, Fn&& fn) {
    if (n_tasks <= 0) return;
    if (n_tasks == 1 || n_threads_ == 1) {
      const double t0 = busy_clock();
      for (int64_t t = 0; t < n_tasks; ++t) fn(0, t);
      if (count_busy_) times_.busy += busy_clock() - t0;
      return;
    }
    using F = std::remove_reference_t<Fn>;
    auto call = [](void* ctx, int thread, int64_t task) { (*static_cast<F*>(ctx))(thread, task); };
    run(call, const_cast<void*>(static_cast<const void*>(&fn)), n_tasks);
  }

  // Calls fn(thread, begin, end) on disjoint contiguous slices covering [0, n), each at least `grain` long
  // (but the last), a few per thread so that the load balances. Small jobs stay on the calling thread.
  template <typename Fn>
  void parallel_parts(int64_t n, int64_t grain, Fn&& fn) {
    if (n <= 0) return;
    const int64_t slice = slice_length(n, grain);
    run_tasks((n + slice - 1) / slice, [&](int thread, int64_t t) {
      const int64_t b = t * slice;
      fn(thread, b, std::min(n, b + slice));
    });
  }

  // As parallel_parts, for jobs that do not need the thread index: fn(begin, end).
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
    parallel_parts(n, grain, [&fn](int, int64_t b, int64_t e) { fn(b, e); });
  }

  // Tasks per thread that the split functions aim for: enough to even out a preempted thread and the tail of
  // a job (threads that finish their last task early wait for the others), few enough that claiming a task
  // (one contended atomic) stays negligible. DF_CPU_TASKS_PER_THREAD overrides it (1..64), for tuning.
  static constexpr int kTasksPerThread = 4;
  int tasks_per_thread() const { return tasks_per_thread_; }

  // For profiles: while on, the threads time their tasks and the caller times each job, so that a job's
  // threads x wall time can be split into work, start-up, tail and absence (PoolTimes). Off by default (no
  // clock reads). Set before the first job.
  void count_busy_time(bool on) { count_busy_ = on; }
  // Thread-seconds since counting began; call between jobs.
  PoolTimes times() const;

 private:
  // Seconds on a steady clock when counting busy time, else 0 (no clock read).
  double busy_clock() const;
  using Call = void (*)(void*, int, int64_t);
  int64_t slice_length(int64_t n, int64_t grain) const;
  void run(Call call, void* ctx, int64_t n_tasks);
  void worker(int thread);
  // Claims and runs tasks of job `generation` until none is left.
  void work(int thread, uint32_t generation) noexcept;
  void wait_for_job(uint32_t& seen);
  void wait_until_done(uint32_t n_tasks);

  int n_threads_ = 1;
  int tasks_per_thread_ = kTasksPerThread;
  std::vector<std::thread> workers_;
  uint32_t generation_ = 0;  // the caller's count of posted jobs

  // Each on its own cache line: the ticket is hammered by claims, the others are waited on.
  // (generation << 32) | index of the next unclaimed task.
  alignas(64) std::atomic<uint64_t> ticket_{0};
  // The generation of the latest job (or of the stop request); the workers' futex word.
  alignas(64) std::atomic<uint32_t> posted_{0};
  std::atomic<int> sleepers_{0};
  // Tasks finished in the current job; the caller's futex word.
  alignas(64) std::atomic<uint32_t> done_{0};
  std::atomic<bool> caller_sleeps_{false};

  // The current job, written by the caller before it publishes the ticket (atomics so that a late worker
  // reading them while the next job is being set up is no data race; see work()).
  alignas(64) std::atomic<Call> call_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<uint32_t> n_tasks_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;

  bool count_busy_ = false;
  // One per thread, each written only by its thread before the done_ increment that the caller waits for.
  struct alignas(64) ThreadTimes {
    double busy = 0;             // seconds in tasks, all jobs
    uint32_t generation = 0;     // the last job this thread ran a task of
    double first = 0, last = 0;  // that job: its first task's start, its last task's end
  };
  std::vector<ThreadTimes> thread_times_;
  PoolTimes times_;  // the caller's sums over finished jobs (and busy time of inline jobs)
};

}  // namespace df::backend

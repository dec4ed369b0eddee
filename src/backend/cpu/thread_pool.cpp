#include "backend/cpu/thread_pool.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <utility>

#include "util/env_int.h"
#include "util/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace df::backend {
namespace {

// How long a thread spins before it sleeps. Workers wait for the next job: within a decode step the gaps
// between parallel jobs (norms, routing, the serial parts of attention) are a few microseconds, and between
// steps sampling takes tens. The caller waits only for tasks that workers are already running, so a long
// wait means a worker was preempted, and sleeping then hands the core back.
constexpr std::chrono::microseconds kWorkerSpin{100};
constexpr std::chrono::microseconds kCallerSpin{30};

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

uint32_t* futex_word(std::atomic<uint32_t>& a) { return reinterpret_cast<uint32_t*>(&a); }

// Sleeps while *word == expected (returns at once if it already differs; spurious returns are fine).
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, futex_word(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word, int count) {
  syscall(SYS_futex, futex_word(word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until done() or the budget is spent; reading the clock only every few pauses keeps a spin cheap.
template <typename Done>
bool spin_until(Done&& done, std::chrono::microseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  tasks_per_thread_ = env_int("DF_CPU_TASKS_PER_THREAD", 1, 64, kTasksPerThread);
  thread_times_.resize(static_cast<size_t>(n_threads_));
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  posted_.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(posted_, INT_MAX);
  for (auto& t : workers_) t.join();
}

int64_t ThreadPool::slice_length(int64_t n, int64_t grain) const {
  const int64_t slices = static_cast<int64_t>(n_threads_) * tasks_per_thread_;
  return std::max<int64_t>({1, grain, (n + slices - 1) / slices});
}

double ThreadPool::busy_clock() const {
  if (!count_busy_) return 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

PoolTimes ThreadPool::times() const {
  PoolTimes t = times_;
  for (const ThreadTimes& b : thread_times_) t.busy += b.busy;
  return t;
}

void ThreadPool::work(int thread, uint32_t generation) noexcept {
  for (;;) {
    // Claim: the ticket counts down the unclaimed tasks of a generation. Packing both in one word means a
    // claim can only succeed while that job is still running, which is what makes reading the job fields
    // below safe even for a worker that woke up late.
    uint64_t t = ticket_.load(std::memory_order_acquire);
    do {
      if (static_cast<uint32_t>(t >> 32) != generation || static_cast<uint32_t>(t) == 0) return;
    } while (!ticket_.compare_exchange_weak(t, t - 1, std::memory_order_acq_rel, std::memory_order_acquire));
    const uint32_t n = n_tasks_.load(std::memory_order_relaxed);
    const int64_t task = static_cast<int64_t>(n - static_cast<uint32_t>(t));
    const double t0 = busy_clock();
    try {
      call_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), thread, task);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (count_busy_) {
      ThreadTimes& tt = thread_times_[static_cast<size_t>(thread)];
      const double t1 = busy_clock();
      tt.busy += t1 - t0;
      if (tt.generation != generation) {
        tt.generation = generation;
        tt.first = t0;
      }
      tt.last = t1;
    }
    // After this increment the job may be over and its fields reused; n was read before it.
    if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == n &&
        caller_sleeps_.load(std::memory_order_seq_cst))
      futex_wake(done_, 1);
  }
}

void ThreadPool::wait_for_job(uint32_t& seen) {
  uint32_t posted = seen;
  const auto changed = [&] {
    posted = posted_.load(std::memory_order_acquire);
    return posted != seen;
  };
  if (!spin_until(changed, kWorkerSpin)) {
    // Announce the sleep before the last check: the caller posts, then reads sleepers_, so one of the two
    // sees the other (all seq_cst).
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    while ((posted = posted_.load(std::memory_order_seq_cst)) == seen) futex_wait(posted_, seen);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  seen = posted;
}

void ThreadPool::wait_until_done(uint32_t n_tasks) {
  const auto finished = [&] { return done_.load(std::memory_order_acquire) == n_tasks; };
  if (spin_until(finished, kCallerSpin)) return;
  caller_sleeps_.store(true, std::memory_order_seq_cst);
  for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != n_tasks;) futex_wait(done_, d);
  caller_sleeps_.store(false, std::memory_order_relaxed);
}

void ThreadPool::run(Call call, void* ctx, int64_t n_tasks) {
  if (n_tasks > static_cast<int64_t>(UINT32_MAX))
    fail("thread pool: a job of {} tasks is more than one job can count", n_tasks);
  const auto n = static_cast<uint32_t>(n_tasks);
  const uint32_t generation = ++generation_;
  const double posted_at = busy_clock();
  // Every task of the previous job has finished (its done_ increment was the last thing it did), so no
  // worker touches these until it claims a task of the ticket published below.
  call_.store(call, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  n_tasks_.store(n, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
  ticket_.store(static_cast<uint64_t>(generation) << 32 | n, std::memory_order_release);
  posted_.store(generation, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake(posted_, INT_MAX);

  work(0, generation);
  wait_until_done(n);
  if (count_busy_) {
    const double end = busy_clock();
    for (const ThreadTimes& tt : thread_times_) {
      if (tt.generation == generation) {
        times_.start += tt.first - posted_at;
        times_.tail += end - tt.last;
      } else {
        times_.absent += end - posted_at;
      }
    }
  }
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::worker(int thread) {
  uint32_t seen = 0;
  for (;;) {
    wait_for_job(seen);
    if (stop_.load(std::memory_order_acquire)) return;
    work(thread, seen);
  }
}

}  // namespace df::backend

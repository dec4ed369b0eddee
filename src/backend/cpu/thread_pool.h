#pragma once
// A small persistent pool for the CPU ops: the calling thread plus n - 1 workers that sleep between jobs.
// Jobs are passed by reference (no std::function, nothing allocated per call), so the decode path can
// run its matmuls through it without touching the heap.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace df::backend {

class ThreadPool {
 public:
  // n_threads <= 0 means one thread per hardware core.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(part, begin, end) on disjoint contiguous slices covering [0, n), one slice per part, the parts
  // numbered 0..size()-1 at most (so `part` can index per-thread scratch); returns when all are done.
  // Slices are at least `grain` long, so small jobs stay on the calling thread. The first exception thrown
  // by a slice is rethrown here. Not reentrant: fn must not call back into the pool.
  template <typename Fn>
  void parallel_parts(int64_t n, int64_t grain, Fn&& fn) {
    if (n <= 0) return;
    const int64_t max_parts = grain > 1 ? (n + grain - 1) / grain : n;
    const int parts = static_cast<int>(std::min<int64_t>(max_parts, n_threads_));
    if (parts <= 1) {
      fn(0, int64_t{0}, n);
      return;
    }
    using F = std::remove_reference_t<Fn>;
    auto call = [](void* ctx, int part, int64_t b, int64_t e) { (*static_cast<F*>(ctx))(part, b, e); };
    run(call, const_cast<void*>(static_cast<const void*>(&fn)), n, parts);
  }

  // As parallel_parts, for jobs that do not need the part index: fn(begin, end).
  template <typename Fn>
  void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
    parallel_parts(n, grain, [&fn](int, int64_t b, int64_t e) { fn(b, e); });
  }

 private:
  using Call = void (*)(void*, int, int64_t, int64_t);
  void run(Call call, void* ctx, int64_t n, int parts);
  void worker(int index);
  void run_part(int part) noexcept;

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int pending_ = 0;
  // The current job.
  Call call_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  int parts_ = 0;
  std::exception_ptr error_;
};

}  // namespace df::backend

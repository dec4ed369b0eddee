#include "backend/cpu/thread_pool.h"

#include <utility>

namespace df::backend {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_part(int part) noexcept {
  // Even split; the first n % parts slices are one longer.
  const int64_t base = n_ / parts_, extra = n_ % parts_;
  const int64_t begin = part * base + std::min<int64_t>(part, extra);
  const int64_t end = begin + base + (part < extra ? 1 : 0);
  if (begin >= end) return;
  try {
    call_(ctx_, part, begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::run(Call call, void* ctx, int64_t n, int parts) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    call_ = call;
    ctx_ = ctx;
    n_ = n;
    parts_ = parts;
    pending_ = parts - 1;
    error_ = nullptr;
    ++generation_;
  }
  start_cv_.notify_all();
  run_part(0);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= parts_) continue;  // this job has fewer slices than the pool has threads
    }
    run_part(index);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace df::backend

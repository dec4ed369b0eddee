#include "server/job.h"

namespace df::server {

void Job::push(Delta d) {
  {
    std::lock_guard lock(mu_);
    deltas_.push_back(std::move(d));
  }
  cv_.notify_all();
}

void Job::finish(Outcome o) {
  {
    std::lock_guard lock(mu_);
    outcome_ = std::move(o);
    done_ = true;
  }
  cv_.notify_all();
}

bool Job::wait(std::chrono::milliseconds timeout, std::vector<Delta>& out) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return done_ || !deltas_.empty(); });
  while (!deltas_.empty()) {
    out.push_back(std::move(deltas_.front()));
    deltas_.pop_front();
  }
  return done_;
}

}  // namespace df::server

#pragma once
// One request in flight between an HTTP handler thread (which waits for its output) and the scheduler
// thread (which generates it): deltas of text as they are decided, then one outcome. cancel() is the
// client going away; the scheduler stops the sequence at its next step.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/request.h"

namespace df::server {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // the most likely tokens of this position, best first
};

struct Delta {
  std::string content, reasoning;
  std::vector<TokenLogprob> logprobs;  // one per token this delta covers (when the request asked for them)
};

struct Outcome {
  std::string finish_reason;  // "stop" or "length" (empty after an error or a cancel)
  int error_status = 0;       // nonzero: the request failed, `error` says why
  std::string error;
  int prompt_tokens = 0;  // the prompt's length
  int cached_tokens = 0;  // of those, taken from the slot's cache
  int completion_tokens = 0;
  double prompt_ms = 0, predicted_ms = 0;
  int slot = -1;
};

class Job {
 public:
  explicit Job(GenRequest request) : req(std::move(request)) {}
  const GenRequest req;

  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

  // Scheduler side.
  void push(Delta d);
  void finish(Outcome o);

  // Handler side: waits up to `timeout` for output; moves the deltas that came into `out`. Returns true
  // once the outcome is there (and every delta before it has been taken).
  bool wait(std::chrono::milliseconds timeout, std::vector<Delta>& out);
  // After wait() returned true.
  const Outcome& outcome() const { return outcome_; }

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Delta> deltas_;
  bool done_ = false;
  Outcome outcome_;
};

}  // namespace df::server

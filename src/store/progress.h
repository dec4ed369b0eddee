#pragma once
// A one-line progress bar on stderr for the long store operations (hashing, ingest, verify): bytes done,
// bytes/s and the time left. It draws only when stderr is a terminal, at most ~10 times a second, and ends
// the line when the phase changes or finish() is called.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "store/store.h"

namespace df::store {

class TerminalProgress {
 public:
  TerminalProgress();  // enabled when stderr is a terminal
  explicit TerminalProgress(bool enabled) : enabled_(enabled) {}
  ~TerminalProgress() { finish(); }
  TerminalProgress(const TerminalProgress&) = delete;
  TerminalProgress& operator=(const TerminalProgress&) = delete;

  void update(std::string_view phase, uint64_t done, uint64_t total);
  void finish();
  // A ProgressFn that draws on this bar; valid while *this lives.
  ProgressFn fn() {
    return [this](std::string_view phase, uint64_t done, uint64_t total) { update(phase, done, total); };
  }

 private:
  using Clock = std::chrono::steady_clock;
  void draw(Clock::time_point now);
  bool enabled_;
  bool line_open_ = false;
  bool pending_ = false;  // an update not drawn yet (rate limit)
  std::string phase_;
  Clock::time_point phase_start_{}, last_draw_{};
  uint64_t last_done_ = 0, last_total_ = 0;
};

// "1.5 GiB"
std::string format_bytes(uint64_t n);

}  // namespace df::store

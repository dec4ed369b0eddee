#pragma once
// What a pull shows while it works, on stderr: on a terminal one bar per phase (bytes, speed, time left),
// redrawn ~10 times a second; otherwise (a log, CI) one line per 10 % of each phase. The speed counts only
// this run's bytes, so a resumed download does not claim the bytes it found on disk.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "store/store.h"

namespace df::cli {

class PullProgress {
 public:
  PullProgress();  // a bar when stderr is a terminal
  ~PullProgress() { finish(); }
  PullProgress(const PullProgress&) = delete;
  PullProgress& operator=(const PullProgress&) = delete;

  void update(std::string_view phase, uint64_t done, uint64_t total);
  void finish();                          // ends an open bar line
  void message(const std::string& text);  // "note: TEXT" on its own line
  store::ProgressFn fn() {
    return [this](std::string_view phase, uint64_t done, uint64_t total) { update(phase, done, total); };
  }

 private:
  using Clock = std::chrono::steady_clock;
  void draw(Clock::time_point now);
  bool tty_;
  bool line_open_ = false;
  std::string phase_;
  Clock::time_point start_{}, last_draw_{};
  uint64_t start_done_ = 0, done_ = 0, total_ = 0;
  int decile_ = 0;  // the last tenth printed (not a terminal)
};

}  // namespace df::cli

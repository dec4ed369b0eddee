#include "cli/pull_progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "store/progress.h"

namespace df::cli {

namespace {

constexpr int kBarWidth = 28;
constexpr auto kRedraw = std::chrono::milliseconds(100);

std::string duration_text(double s) {
  if (!(s >= 0) || s > 360000) return "--:--";
  const auto n = static_cast<uint64_t>(s + 0.5);
  return n >= 3600 ? fmt::format("{}:{:02}:{:02}", n / 3600, n / 60 % 60, n % 60)
                   : fmt::format("{}:{:02}", n / 60, n % 60);
}

}  // namespace

PullProgress::PullProgress() : tty_(::isatty(STDERR_FILENO) == 1) {}

void PullProgress::update(std::string_view phase, uint64_t done, uint64_t total) {
  const auto now = Clock::now();
  if (phase != phase_) {
    finish();
    phase_ = std::string(phase);
    start_ = now;
    start_done_ = done;
    last_draw_ = {};
    decile_ = total > 0 ? static_cast<int>(done * 10 / total) : 10;
  }
  done_ = done;
  total_ = total;
  if (tty_) {
    if (done >= total || now - last_draw_ >= kRedraw) draw(now);
    return;
  }
  const int decile = total > 0 ? static_cast<int>(std::min(done, total) * 10 / total) : 10;
  if (decile > decile_) {
    decile_ = decile;
    draw(now);
  }
}

void PullProgress::draw(Clock::time_point now) {
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0.25 ? static_cast<double>(done_ - start_done_) / elapsed : 0;
  const double fraction =
      total_ > 0 ? static_cast<double>(std::min(done_, total_)) / static_cast<double>(total_) : 1;
  const std::string speed = rate > 0 ? store::format_bytes(static_cast<uint64_t>(rate)) + "/s" : "--";
  if (!tty_) {
    fmt::print(stderr, "{}: {:3.0f}% ({} of {}, {})\n", phase_, fraction * 100, store::format_bytes(done_),
               store::format_bytes(total_), speed);
    return;
  }
  std::string bar(static_cast<size_t>(fraction * kBarWidth), '#');
  bar.resize(kBarWidth, '.');
  const std::string eta = done_ >= total_ ? "0:00"
                          : rate > 0      ? duration_text(static_cast<double>(total_ - done_) / rate)
                                          : "--:--";
  fmt::print(stderr, "\r{:<26} [{}] {:3.0f}% {} / {}  {}  ETA {}\x1b[K", phase_, bar, fraction * 100,
             store::format_bytes(done_), store::format_bytes(total_), speed, eta);
  std::fflush(stderr);
  line_open_ = true;
}

void PullProgress::finish() {
  if (!line_open_) return;
  draw(Clock::now());
  std::fputs("\n", stderr);
  line_open_ = false;
}

void PullProgress::message(const std::string& text) {
  finish();
  fmt::print(stderr, "note: {}\n", text);
}

}  // namespace df::cli

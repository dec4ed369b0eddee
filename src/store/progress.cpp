#include "store/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace df::store {

namespace {

constexpr int kBarWidth = 28;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr double kMinRateSeconds = 0.25;

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 360000) return "--:--";
  auto s = static_cast<uint64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

std::string format_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

TerminalProgress::TerminalProgress() : enabled_(::isatty(STDERR_FILENO) == 1) {}

void TerminalProgress::update(std::string_view phase, uint64_t done, uint64_t total) {
  if (!enabled_) return;
  if (phase != phase_) {
    finish();
    phase_ = std::string(phase);
    phase_start_ = Clock::now();
    last_draw_ = {};
  }
  last_done_ = done;
  last_total_ = total;
  pending_ = true;
  auto now = Clock::now();
  if (done >= total || now - last_draw_ >= kRedrawInterval) draw(now);
}

void TerminalProgress::draw(Clock::time_point now) {
  last_draw_ = now;
  pending_ = false;
  const uint64_t done = last_done_, total = last_total_;
  double elapsed = std::chrono::duration<double>(now - phase_start_).count();
  // The phase clock starts at its first report, so the first moments say nothing about the rate.
  bool rate_known = elapsed >= kMinRateSeconds || (done >= total && elapsed > 0);
  double rate = rate_known ? static_cast<double>(done) / elapsed : 0;
  double fraction = total > 0 ? static_cast<double>(std::min(done, total)) / static_cast<double>(total) : 1.0;
  std::string bar(static_cast<size_t>(fraction * kBarWidth), '#');
  bar.resize(kBarWidth, '.');
  std::string speed = rate_known ? format_bytes(static_cast<uint64_t>(rate)) + "/s" : "--";
  std::string eta = done >= total ? "0:00"
                    : rate > 0    ? format_duration(static_cast<double>(total - done) / rate)
                                  : "--:--";
  std::string line = fmt::format("\r{:<18} [{}] {:3.0f}% {} / {}  {}  ETA {}\x1b[K", phase_, bar,
                                 fraction * 100, format_bytes(done), format_bytes(total), speed, eta);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  line_open_ = true;
}

void TerminalProgress::finish() {
  if (!enabled_ || !line_open_) return;
  if (pending_) draw(Clock::now());
  std::fputs("\n", stderr);
  line_open_ = false;
}

}  // namespace df::store

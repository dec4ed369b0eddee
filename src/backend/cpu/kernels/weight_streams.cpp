#include "backend/cpu/kernels/weight_streams.h"

#include <cpuid.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "util/error.h"

namespace df::kernels {
namespace {

bool cpu_is_intel() {
  unsigned max_leaf = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &max_leaf, &ebx, &ecx, &edx)) return false;
  char vendor[12];
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::string_view(vendor, sizeof vendor) == "GenuineIntel";
}

// The variable's value as an integer in [lo, hi], or `fallback` when it is unset or empty.
int env_int(const char* name, int lo, int hi, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const std::string_view text(v);
  int x = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (ec != std::errc{} || end != text.data() + text.size() || x < lo || x > hi)
    fail("{}={} is not a whole number from {} to {}", name, v, lo, hi);
  return x;
}

WeightStreams choose() {
  WeightStreams w;
  if (cpu_is_intel()) {
    w.streams = 1;
    w.prefetch_bytes = 4096;
  }
  w.streams = env_int("DF_Q4_0X16_STREAMS", 1, 2, w.streams);
  w.prefetch_bytes = env_int("DF_Q4_0X16_PREFETCH", 0, 1 << 20, w.prefetch_bytes);
  return w;
}

}  // namespace

const WeightStreams& weight_streams() {
  static const WeightStreams w = choose();
  return w;
}

}  // namespace df::kernels

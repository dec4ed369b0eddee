#pragma once
// Rows for the backends' argmax op (Backend::argmax, util/argmax.h) and the scalar scan they must agree
// with: ties at the maximum, NaNs first and among the values, ±0, infinities, sizes that are no multiple
// of a SIMD width or a block.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

namespace df::testing {

// The definition: the first index whose value is greater than every earlier one's (so a NaN is never
// chosen and equal values keep the first), 0 where the first value is NaN.
inline int32_t scan_argmax(std::span<const float> row) {
  if (row.empty() || std::isnan(row[0])) return 0;
  size_t best = 0;
  for (size_t i = 1; i < row.size(); ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<int32_t>(best);
}

// `rows` rows of n values each, every row of a different kind (the kinds repeat when rows > 8).
inline std::vector<float> argmax_rows(int rows, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<size_t> at(0, n - 1);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(static_cast<size_t>(rows) * n);
  for (int r = 0; r < rows; ++r) {
    float* row = x.data() + static_cast<size_t>(r) * n;
    for (size_t i = 0; i < n; ++i) row[i] = normal(rng);
    switch (r % 8) {
      case 0: {  // the maximum twice: the first of the two
        const size_t a = at(rng), b = at(rng);
        row[a] = row[b] = 100.0f;
        break;
      }
      case 1:
        row[0] = nan;
        break;  // 0, whatever follows
      case 2:   // NaNs before and after the maximum
        for (size_t i = 0; i < n; i += 3) row[i] = nan;
        row[n - 1] = 50.0f;
        if (n > 1) row[0] = -1.0f;
        break;
      case 3:
        for (size_t i = 0; i < n; ++i) row[i] = -inf;
        break;
      case 4:  // -0 before +0, everything else negative: the first zero
        for (size_t i = 0; i < n; ++i) row[i] = -1.0f - std::fabs(row[i]);
        row[n / 2] = -0.0f;
        row[n - 1] = 0.0f;
        break;
      case 5:
        row[n - 1] = inf;
        break;
      case 6:  // a finite first value, NaN after it
        for (size_t i = 1; i < n; ++i) row[i] = nan;
        break;
      default:
        break;  // plain random values
    }
  }
  return x;
}

}  // namespace df::testing

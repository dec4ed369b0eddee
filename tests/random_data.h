#pragma once
// Test inputs of the backend tests: normally distributed floats from a seed, and weight rows of those values
// quantized to a block type in ggml's row layout (what a GGUF holds).
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "gguf/ggml_types.h"
#include "quant/quant.h"

namespace df::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// `rows` rows of n_in random values (scale 0.5) quantized to t, one after another.
inline std::vector<uint8_t> quantized_rows(GgmlType t, int64_t n_in, int64_t rows, uint32_t seed) {
  const auto x = random_floats(static_cast<size_t>(n_in * rows), seed, 0.5f);
  const size_t row_bytes = ggml_row_bytes(t, n_in);
  std::vector<uint8_t> bytes(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    quant::quantize_row(t, x.data() + r * n_in, bytes.data() + static_cast<size_t>(r) * row_bytes, n_in);
  return bytes;
}

}  // namespace df::testing

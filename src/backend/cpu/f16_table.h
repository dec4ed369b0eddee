#pragma once
// f16 → f32 through a 65536-entry table (exact: every half is a float), built once on first use, for the
// inner loops of the f16 KV-cache products.
#include <cstdint>

namespace df::backend {

const float* f16_to_f32_table();

// Σ a[i]·b[i] of two f16 rows: each product is exact in float, the sum runs in double (ggml's scalar
// ggml_vec_dot_f16), the result is rounded to float.
inline float dot_f16(const float* table, const uint16_t* a, const uint16_t* b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(table[a[i]] * table[b[i]]);
  return static_cast<float>(sum);
}

}  // namespace df::backend

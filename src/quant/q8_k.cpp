// Q8_K: llama.cpp's activation format for K-quant dot products. 256 int8 quants, an f32 scale and the sums
// of each group of 16 quants (the K-quant dot products use them to apply the per-sub-block minimums).
#include <algorithm>
#include <cmath>

#include "quant/quant_detail.h"

namespace df::quant::detail {

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) {
    for (int j = 0; j < QK_K; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      y[i] = BlockQ8_K{};
      continue;
    }
    // The signed extreme maps to -127, so d = 1/iscale carries the opposite sign of that value.
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j)
      y[i].qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < QK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * g + j];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace df::quant::detail

// Q4_1: 32 values, f16 scale d and offset m, 4-bit quants q with y = q * d + m (same nibble order as Q4_0).
#include <algorithm>
#include <cfloat>

#include "quant/quant_detail.h"

namespace df::quant::detail {

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK4_0) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + QK4_0 / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK4_0) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < QK4_0; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const auto q0 = static_cast<int8_t>(truncate_like_x86((x[j] - min) * id + 0.5f));
      const auto q1 = static_cast<int8_t>(truncate_like_x86((x[j + QK4_0 / 2] - min) * id + 0.5f));
      const auto lo = static_cast<uint8_t>(std::min<int>(15, q0));
      const auto hi = static_cast<uint8_t>(std::min<int>(15, q1));
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

float dot_q4_1_q8_1(const BlockQ4_1* x, const BlockQ8_1* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sum_lo = 0, sum_hi = 0;
    for (int j = 0; j < QK4_0 / 2; ++j) {
      sum_lo += (x[i].qs[j] & 0x0F) * y[i].qs[j];
      sum_hi += (x[i].qs[j] >> 4) * y[i].qs[j + QK4_0 / 2];
    }
    // The offset m times the activation block's sum s: s = d_a * sum(q_a) is stored by Q8_1 for this.
    sum += (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) * static_cast<float>(sum_lo + sum_hi) +
           fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  }
  return sum;
}

}  // namespace df::quant::detail

// Q4_0: 32 values, f16 scale d, 4-bit quants q with y = (q - 8) * d. Low nibbles hold elements 0..15, high
// nibbles 16..31.
#include <algorithm>
#include <cmath>

#include "quant/quant_detail.h"

namespace df::quant::detail {

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK4_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + QK4_0 / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK4_0) {
    // The scale maps the value of largest magnitude, sign included, to -8: the asymmetric end of [-8, 7].
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK4_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const auto q0 = static_cast<int8_t>(truncate_like_x86(x[j] * id + 8.5f));
      const auto q1 = static_cast<int8_t>(truncate_like_x86(x[j + QK4_0 / 2] * id + 8.5f));
      const auto lo = static_cast<uint8_t>(std::min<int>(15, q0));
      const auto hi = static_cast<uint8_t>(std::min<int>(15, q1));
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

float dot_q4_0_q8_0(const BlockQ4_0* x, const BlockQ8_0* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sum_lo = 0, sum_hi = 0;
    for (int j = 0; j < QK4_0 / 2; ++j) {
      sum_lo += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
      sum_hi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QK4_0 / 2];
    }
    sum += static_cast<float>(sum_lo + sum_hi) * fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
  }
  return sum;
}

}  // namespace df::quant::detail

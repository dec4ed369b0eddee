// MXFP4: 32 FP4 (E2M1) codes sharing one E8M0 exponent; y = kMxfp4Values[code] * 2^(e - 128). Same nibble
// order as Q4_0.
#include <cmath>

#include "quant/quant_detail.h"

namespace df::quant::detail {
namespace {

// The code whose value is nearest to v; on a tie the lower index wins, as in ggml.
int nearest_mxfp4_code(float v, float scale) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * scale - v);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * scale - v);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_MXFP4) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      y[j] = static_cast<float>(kMxfp4Values[x[i].qs[j] & 0x0F]) * d;
      y[j + QK_MXFP4 / 2] = static_cast<float>(kMxfp4Values[x[i].qs[j] >> 4]) * d;
    }
  }
}

void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_MXFP4) {
    float amax = 0.0f;
    for (int j = 0; j < QK_MXFP4; ++j) {
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    }
    // The largest code (6, stored doubled as 12) times 2^(e-128) should reach amax: e = floor(log2 amax) - 2
    // + 127. ggml narrows this float to uint8_t directly, so a tiny amax wraps around; reproduced here.
    const uint8_t e =
        amax > 0.0f ? static_cast<uint8_t>(truncate_like_x86(std::floor(std::log2(amax)) - 2 + 127)) : 0;
    const float d = e8m0_to_fp32_half(e);
    y[i].e = e;
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      const int lo = nearest_mxfp4_code(x[j], d);
      const int hi = nearest_mxfp4_code(x[j + QK_MXFP4 / 2], d);
      y[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

float dot_mxfp4_q8_0(const BlockMXFP4* x, const BlockQ8_0* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(y[i].d) * e8m0_to_fp32_half(x[i].e);
    int sum_lo = 0, sum_hi = 0;
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      sum_lo += y[i].qs[j] * kMxfp4Values[x[i].qs[j] & 0x0F];
      sum_hi += y[i].qs[j + QK_MXFP4 / 2] * kMxfp4Values[x[i].qs[j] >> 4];
    }
    sum += d * static_cast<float>(sum_lo + sum_hi);
  }
  return sum;
}

}  // namespace df::quant::detail

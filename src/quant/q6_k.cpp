// Q6_K: 256 values in 16 sub-blocks of 16, each with an int8 scale; 6-bit quants split into 4 low bits (ql)
// and 2 high bits (qh); y = d * scale * (q - 32). d is stored last.
#include <algorithm>
#include <cmath>

#include "quant/quant_detail.h"

namespace df::quant::detail {
namespace {

// Element order of the 6-bit quants: in each half of 128 values, ql[l] holds elements l (low nibble) and
// l + 64 (high nibble), ql[l + 32] elements l + 32 and l + 96, and qh[l] their high bits in pairs.
void unpack_q6_k(const BlockQ6_K& b, int8_t* q) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    int8_t* out = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      out[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

}  // namespace

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) {
    const float d = fp16_to_fp32(x[i].d);
    int8_t q[QK_K];
    unpack_q6_k(x[i], q);
    for (int j = 0; j < QK_K; ++j)
      y[j] = d * static_cast<float>(x[i].scales[j / 16]) * static_cast<float>(q[j]);
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  int8_t L[QK_K];
  float scales[QK_K / 16];
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int b = 0; b < QK_K / 16; ++b) {
      scales[b] = make_qx_quants_rmse1(16, 32, x + 16 * b, L + 16 * b);
      if (std::fabs(scales[b]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[b]);
        max_scale = scales[b];
      }
    }
    if (max_abs_scale < 1e-15f) {
      y[i] = BlockQ6_K{};
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int b = 0; b < QK_K / 16; ++b) {
      y[i].scales[b] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[b])));
    }
    // Requantize against the stored scales.
    for (int b = 0; b < QK_K / 16; ++b) {
      const float d = fp16_to_fp32(y[i].d) * static_cast<float>(y[i].scales[b]);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * b + l] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * b + l] / d), -32, 31) + 32);
      }
    }
    for (int half = 0; half < 2; ++half) {
      uint8_t* ql = y[i].ql + 64 * half;
      uint8_t* qh = y[i].qh + 32 * half;
      const int8_t* Lh = L + 128 * half;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                     ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

float dot_q6_k_q8_k(const BlockQ6_K* x, const BlockQ8_K* y, int64_t nb) {
  float lanes[8] = {};  // ggml's eight float lanes, see dot_q4_k_q8_k
  for (int64_t i = 0; i < nb; ++i) {
    int8_t q[QK_K];
    unpack_q6_k(x[i], q);
    int32_t acc[8] = {};
    for (int j = 0; j < QK_K; ++j) acc[j % 8] += x[i].scales[j / 16] * (y[i].qs[j] * q[j]);
    const float d = fp16_to_fp32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) lanes[l] += d * static_cast<float>(acc[l]);
  }
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  return sum;
}

}  // namespace df::quant::detail

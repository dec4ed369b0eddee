// Q5_K: Q4_K's layout plus a fifth bit per value in qh: y = d * scale * (q4 + 16 * bit) - dmin * min.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/quant_detail.h"

namespace df::quant::detail {

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int chunk = 0; chunk < 4; ++chunk, ql += 32) {
      const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * chunk));
      const uint8_t bit_hi = static_cast<uint8_t>(2u << (2 * chunk));
      uint8_t sc, m;
      unpack_scale_min_k4(2 * chunk, x[i].scales, sc, m);
      const float d1 = d * sc, m1 = dmin * m;
      unpack_scale_min_k4(2 * chunk + 1, x[i].scales, sc, m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & bit_lo ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & bit_hi ? 16 : 0)) - m2;
    }
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  uint8_t L[QK_K], Laux[32];
  float weights[32], mins[QK_K / 32], scales[QK_K / 32];
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < QK_K / 32; ++j) {
      const float* xs = x + 32 * j;
      float sum_x2 = 0.0f;
      for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
      scales[j] = make_qkx2_quants(32, 31, xs, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
      const auto ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
      const auto lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
      if (j < 4) {
        y[i].scales[j] = ls;
        y[i].scales[j + 4] = lm;
      } else {
        y[i].scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        y[i].scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
        y[i].scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
      }
    }
    y[i].d = fp32_to_fp16(max_scale / 63.f);
    y[i].dmin = fp32_to_fp16(max_min / 63.f);
    for (int j = 0; j < QK_K / 32; ++j) {
      uint8_t sc, m;
      unpack_scale_min_k4(j, y[i].scales, sc, m);
      const float d = fp16_to_fp32(y[i].d) * sc;
      if (d == 0.0f) continue;
      const float dm = fp16_to_fp32(y[i].dmin) * m;
      for (int l = 0; l < 32; ++l) {
        L[32 * j + l] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + l] + dm) / d), 0, 31));
      }
    }
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    uint8_t* ql = y[i].qs;
    for (int chunk = 0; chunk < 4; ++chunk, ql += 32) {
      const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * chunk));
      const uint8_t bit_hi = static_cast<uint8_t>(2u << (2 * chunk));
      for (int l = 0; l < 32; ++l) {
        int lo = L[64 * chunk + l], hi = L[64 * chunk + l + 32];
        if (lo > 15) {
          lo -= 16;
          y[i].qh[l] |= bit_lo;
        }
        if (hi > 15) {
          hi -= 16;
          y[i].qh[l] |= bit_hi;
        }
        ql[l] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
  }
}

float dot_q5_k_q8_k(const BlockQ5_K* x, const BlockQ8_K* y, int64_t nb) {
  float lanes[8] = {};  // ggml's eight float lanes, see dot_q4_k_q8_k
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int8_t q[QK_K];
    for (int chunk = 0; chunk < 4; ++chunk) {
      const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * chunk));
      const uint8_t bit_hi = static_cast<uint8_t>(2u << (2 * chunk));
      for (int l = 0; l < 32; ++l) {
        const uint8_t b = x[i].qs[32 * chunk + l], h = x[i].qh[l];
        q[64 * chunk + l] = static_cast<int8_t>((b & 0xF) + (h & bit_lo ? 16 : 0));
        q[64 * chunk + 32 + l] = static_cast<int8_t>((b >> 4) + (h & bit_hi ? 16 : 0));
      }
    }
    uint8_t scales[8], mins[8];
    for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, x[i].scales, scales[j], mins[j]);
    int sum_mins = 0;
    for (int g = 0; g < QK_K / 16; ++g) sum_mins += y[i].bsums[g] * mins[g / 2];
    int32_t acc[8] = {};
    for (int j = 0; j < QK_K; ++j) acc[j % 8] += scales[j / 32] * (y[i].qs[j] * q[j]);
    const float d = fp16_to_fp32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) lanes[l] += d * static_cast<float>(acc[l]);
    const float dmin = fp16_to_fp32(x[i].dmin) * y[i].d;
    sum -= dmin * static_cast<float>(sum_mins);
  }
  for (float lane : lanes) sum += lane;
  return sum;
}

}  // namespace df::quant::detail

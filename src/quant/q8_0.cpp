// Q8_0 and Q8_1: 32 int8 quants with an f16 scale (Q8_1 adds s = d * sum(q), used by Q4_1's dot product).
// Both are weight formats and llama.cpp's activation formats; quantization is ggml's reference rounding.
#include <cmath>

#include "quant/quant_detail.h"

namespace df::quant::detail {
namespace {

// Returns d; writes q = round(x * (1/d)) half away from zero. The quants use the unrounded d, the block
// stores it rounded to f16.
float quantize_block_q8(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < QK8_0; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;
  }
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < QK8_0; ++j) q[j] = static_cast<int8_t>(truncate_like_x86(std::round(x[j] * id)));
  return d;
}

}  // namespace

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK8_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK8_0) y[i].d = fp32_to_fp16(quantize_block_q8(x, y[i].qs));
}

float dot_q8_0_q8_0(const BlockQ8_0* x, const BlockQ8_0* y, int64_t nb) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sumi = 0;
    for (int j = 0; j < QK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sum += static_cast<float>(sumi) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
  }
  return sum;
}

void dequantize_q8_1(const BlockQ8_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK8_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK8_0) {
    const float d = quantize_block_q8(x, y[i].qs);
    int sum = 0;
    for (int j = 0; j < QK8_0; ++j) sum += y[i].qs[j];
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

}  // namespace df::quant::detail

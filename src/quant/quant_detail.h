#pragma once
// Internals of the reference formats: ggml's rounding helpers and one set of block-level functions per type.
// Every function takes a count of blocks; the public entry points in quant.h validate and dispatch.
#include <cstdint>
#include <cstring>

#include "quant/quant.h"

// ggml's quantizers are C compiled without FMA contraction. C++ compilers fuse a * b + c into one FMA by
// default whenever the target has FMA (e.g. -march=native), which changes roundings and so the quantized
// bytes; every file of this module includes this header after its system headers, so the rest of it is
// compiled without contraction whatever the flags.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace df::quant::detail {

// ggml's nearest_int: round to nearest, ties to even, through the 1.5 * 2^23 magic constant. Valid for
// |v| <= 2^22 - 1; outside that range it returns the same (meaningless) value ggml's does.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &shifted, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

// A C float-to-integer conversion as x86-64 executes it (cvttss2si: truncate; NaN and out-of-range give
// INT32_MIN). ggml's quantizers narrow floats straight into int8_t/uint8_t, which C leaves undefined outside
// the range; this reproduces the machine's result without the undefined behaviour.
inline int32_t truncate_like_x86(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(v);
}

// ---- F32 / F16 / BF16 rows (n values) ----
void dequantize_f16(const uint16_t* x, float* y, int64_t n);
void dequantize_bf16(const uint16_t* x, float* y, int64_t n);
void quantize_f16(const float* x, uint16_t* y, int64_t n);
void quantize_bf16(const float* x, uint16_t* y, int64_t n);
float dot_f32(const float* x, const float* y, int64_t n);
float dot_f16(const uint16_t* x, const uint16_t* y, int64_t n);
float dot_bf16(const uint16_t* x, const uint16_t* y, int64_t n);

// ---- 32-value block formats (nb blocks) ----
void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nb);
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb);
float dot_q4_0_q8_0(const BlockQ4_0* x, const BlockQ8_0* y, int64_t nb);

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t nb);
void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb);
float dot_q4_1_q8_1(const BlockQ4_1* x, const BlockQ8_1* y, int64_t nb);

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nb);
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb);
float dot_q8_0_q8_0(const BlockQ8_0* x, const BlockQ8_0* y, int64_t nb);

void dequantize_q8_1(const BlockQ8_1* x, float* y, int64_t nb);
void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t nb);

void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t nb);
void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t nb);
float dot_mxfp4_q8_0(const BlockMXFP4* x, const BlockQ8_0* y, int64_t nb);

// ---- 256-value super-blocks (nb blocks) ----
void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb);
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb);

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb);
float dot_q4_k_q8_k(const BlockQ4_K* x, const BlockQ8_K* y, int64_t nb);

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb);
float dot_q5_k_q8_k(const BlockQ5_K* x, const BlockQ8_K* y, int64_t nb);

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb);
float dot_q6_k_q8_k(const BlockQ6_K* x, const BlockQ8_K* y, int64_t nb);

// ---- K-quant scale searches (ggml's make_qx_quants with rmse_type 1 and no importance weights, and
// make_qkx2_quants), shared by the K-quant quantizers ----
float make_qx_quants_rmse1(int n, int nmax, const float* x, int8_t* L);
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep);

}  // namespace df::quant::detail

#pragma once
// Block formats (ARCHITECTURES.md 12): layouts, reference quantizers (bit-identical to ggml's *_ref
// quantizers where stated), dequantization, llama.cpp's activation quantization, and scalar reference dot
// products of each weight type against its activation ("vec_dot") type. These are the references every
// SIMD kernel is tested against.
#include <cstdint>
#include <cstring>

#include "gguf/ggml_types.h"

namespace df::quant {

constexpr int QK4_0 = 32, QK8_0 = 32, QK_K = 256, QK_MXFP4 = 32;

#pragma pack(push, 1)
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[32];
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292 && sizeof(BlockMXFP4) == 17);

// IEEE half / bfloat16 conversions (round to nearest even, as ggml's scalar conversions do). Table-free and
// exact for subnormals, infinities and NaN (fp32_to_fp16 turns every NaN into a quiet NaN, 0x7E00 | sign, as
// ggml's scalar conversion does).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);  // round to nearest even, NaN kept quiet

// MXFP4 helpers shared with the SIMD kernels. Code table of E2M1 values times two (ggml's kvalues_mxfp4).
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// Scale of an MXFP4 block: 2^(e - 128), i.e. the E8M0 value halved to compensate for the doubled table.
inline float e8m0_to_fp32_half(uint8_t e) {
  // e < 2 gives a float subnormal (2^-128, 2^-127), which an exponent field cannot hold.
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed scale bytes.
inline void unpack_scale_min_k4(int j, const uint8_t* scales, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = scales[j] & 63;
    min = scales[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
    min = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// Types this module implements (dequantize + quantize): F32 F16 BF16 Q4_0 Q4_1 Q8_0 Q8_1 Q4_K Q5_K Q6_K Q8_K
// MXFP4.
bool is_supported(GgmlType t);

// Every function below throws df::Error for a type it does not implement and for an n that is negative or
// not a multiple of the type's block size.

// Dequantize n values (n a multiple of the block size) from src to dst.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
// Reference quantization of n values, as ggml's quantize_row_<type>_ref (bit-identical for Q4_0, Q8_0,
// Q6_K, Q4_K, MXFP4 and the others implemented).
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

// The activation format llama.cpp's CPU matmul quantizes the f32 input to for weight type w
// (Q8_0 for Q4_0/Q8_0/MXFP4, Q8_1 for Q4_1, Q8_K for K-quants, F16 for F16, BF16 for BF16, F32 for F32).
GgmlType vec_dot_type(GgmlType w);
// Whether weight type w has a dot product here (vec_dot_type and vec_dot take it): the types a matmul can
// use.
bool has_vec_dot(GgmlType w);
// Quantize an activation row the way llama.cpp's CPU path does, with the reference rounding of ggml's *_ref
// quantizers (Q8_0/Q8_1: d = amax/127, q = roundf(x * (1/d)) half away from zero, d stored as f16;
// Q8_K: see ARCHITECTURES.md 12.10; F16/BF16: round to nearest even; F32: copy). The AVX2 Q8_0 path rounds
// half to even instead; the difference is immaterial in practice.
void quantize_activation(GgmlType act, const float* src, void* dst, int64_t n);
// Scalar reference dot product of one weight row (type w) with one activation row already quantized to
// vec_dot_type(w), n values, computed as ggml's generic (scalar) vec_dot: integer sums inside a block, block
// results summed in float in ggml's order (the K-quants keep ggml's eight float lanes); F32/F16/BF16 multiply
// in float and sum the products in double, as ggml's scalar ggml_vec_dot_f32/_f16/_bf16 do.
float vec_dot(GgmlType w, const void* weight_row, const void* act_row, int64_t n);

}  // namespace df::quant

#pragma once
// Dot-product kernels of the CPU backend, one set per weight type and SIMD level, chosen at run time.
//
// Semantics are those of df::quant::vec_dot / quantize_activation (quant.h): the activation row is in the
// weight type's vec_dot_type, n values. For the block formats (Q4_0 Q4_1 Q8_0 MXFP4 Q4_K Q5_K Q6_K) the
// integer sum of a block is exact, and the kernels keep the reference's float operations and their order:
// per block the same products in the same order, no fused multiply-add; across blocks the same sequential
// sum (the K-quants: the same eight integer lane sums and eight float lanes). Their results are therefore
// bit-identical to the scalar reference at every level, and so are the activation quantizers' bytes.
// F32, F16 and BF16 are the exception: the reference sums its float products sequentially in double, the
// kernels in eight double lanes, so results may differ by the rounding of the reordered double sum:
//   |kernel - reference| <= 2^-23 * |reference| + 2 * n * 2^-53 * sum |w_i * a_i|
// (in practice equal after the final rounding to float, except near ties or under heavy cancellation).
//
// Where the speed comes from: GemmFn computes a rows x cols block of outputs in tiles of 4 weight rows x 4
// activation rows, unpacking each weight block once for the tile's activation rows and preparing each
// activation block once for its weight rows. Each output is still computed by the same operations as a
// single dot product, so results never depend on the tile shape, the batch or the thread split.
//
// The AVX-512 level uses AVX-512 VNNI (vpdpbusd, vpdpwssd) and the 32 vector registers with 256-bit
// vectors: Zen 4 splits 512-bit integer operations into two 256-bit halves, and decode is bound by memory.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/kernels/cpu_features.h"
#include "gguf/ggml_types.h"

namespace df::kernels {

// out = dot(w_row, act_row) over n values.
using DotFn = float (*)(const void* w_row, const void* act_row, int64_t n);

// A block of the matrix product: for r < rows and c < cols,
//   out[c * out_stride + r] = dot(w + r * w_stride, act + c * act_stride, n)
// (strides in bytes for the rows, in floats for the output). rows of W against one activation row (cols =
// 1) is a decode matvec; one row of W against many activation rows (rows = 1) or a rows x cols tile is
// prefill. Each output equals the DotFn result for its pair, bit for bit.
using GemmFn = void (*)(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                        int64_t cols, int64_t n, float* out, size_t out_stride);

// Quantizes n values to an activation format, as quant::quantize_activation does, byte for byte.
using QuantizeFn = void (*)(const float* x, void* dst, int64_t n);

struct VecDotKernels {
  GgmlType weight;
  GgmlType activation;  // quant::vec_dot_type(weight)
  SimdLevel level;      // the level that implements them (lower than asked when a level has no kernel)
  DotFn dot;
  GemmFn gemm;
  // The gemm over rows repacked for this type (quant/q4_0x16.h: Q4_0 only; nullptr for the others). Its w
  // is the group holding the first row, w_stride the unpacked row bytes, rows a multiple of 16. Outputs
  // equal those of gemm on the unpacked rows, bit for bit.
  GemmFn packed_gemm;
  SimdLevel packed_level;  // the level that implements packed_gemm
};

// Kernels of weight type w at a level: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4, all of
// them implemented at every level. The function pointers take n unchecked: call check_row_length first
// (once per matrix). Throws df::Error for a type without kernels and for a level this machine does not
// support. The overload without a level calls select_simd_level (reads DF_SIMD): resolve once and keep the
// reference rather than calling it per row.
const VecDotKernels& vec_dot_kernels(GgmlType w, SimdLevel level);
inline const VecDotKernels& vec_dot_kernels(GgmlType w) { return vec_dot_kernels(w, select_simd_level()); }

// The activation quantizer for format act (F16, Q8_0, Q8_1, Q8_K have SIMD versions; F32, BF16 and every
// format at the scalar level use quant::quantize_activation). Same rules as vec_dot_kernels.
QuantizeFn activation_quantizer(GgmlType act, SimdLevel level);

// Throws df::Error unless n >= 0 and n is a multiple of the block size of w (and of its activation format).
void check_row_length(GgmlType w, int64_t n);

}  // namespace df::kernels

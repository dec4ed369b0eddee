#pragma once
// Q8_0 activation quantization by a whole thread block into its shared memory, value for value what the
// quantize launch (quantize.cu) writes: a decode product quantizes its own few input rows instead of waiting
// for a separate launch (a kernel of a few microseconds for a few kilobytes).
#include "backend/cuda/device_common.cuh"

namespace df::backend::cuda {

// ggml's quantize_row_q8_0_ref: d = amax / 127, q = round(x / d) half away from zero through the unrounded
// inverse, d stored as f16. NaN gives 0, as x86's INT_MIN narrowed to a byte.
__device__ __forceinline__ float q8_0_inverse(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }
__device__ __forceinline__ int q8_0_value(float v, float id) { return __float2int_rz(roundf(v * id)); }

// `rows` rows of n floats (row r at row_of(r): 16-byte aligned, n a multiple of 32) into dst in the aligned
// activation layout (kernels.h act_row_stride: the n quants, then a float scale per 32 values; rows `stride`
// bytes apart). Eight threads per 32-value block, a float4 each, the block's maximum magnitude across the
// eight by shuffles (as quantize.cu's vector kernel): a consumer kernel runs this after waiting for its
// input, on the step's critical path where its weights have already arrived. A thread per block (64 of 128
// threads busy for a 2,048-value row, each a chain of 32 maxima) took 3.3 us more per down/combine launch
// whose weights were in L2 (session 28; in the step, where they come from HBM, no decode figure moved with it
// alone). Each thread issues its loads for kBatch tasks before it quantizes any. Every thread of the block
// must call it (blockDim.x a multiple of 32), and the caller synchronises the block before reading dst.
template <class RowOf>
__device__ __forceinline__ void block_quantize_q8_0(RowOf row_of, int rows, int64_t n, uint8_t* dst,
                                                    size_t stride) {
  constexpr int kBatch = 4;
  // 32-bit task indices (every caller's rows fit a block's shared memory or registers, far below 2^31 values)
  // and no division for one row: 64-bit division and remainder were a large share of this loop's
  // instructions, which a consumer runs on its critical path.
  const int per_row = static_cast<int>(n / 32) * 8, tasks = rows * per_row;
  const int step = static_cast<int>(blockDim.x) * kBatch;
  for (int base = 0; base < tasks; base += step) {  // uniform across the warp: every lane shuffles
    float4 f[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
      const int r = rows == 1 ? 0 : i / per_row;
      f[j] = i < tasks ? reinterpret_cast<const float4*>(row_of(r))[i - r * per_row]
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
      // The maximum of the magnitudes does not depend on the order they are met in (fmaxf passes over NaN).
      float amax = fmaxf(fmaxf(fabsf(f[j].x), fabsf(f[j].y)), fmaxf(fabsf(f[j].z), fabsf(f[j].w)));
#pragma unroll
      for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o, 8));
      if (i >= tasks) continue;
      const float d = amax / 127;
      const float id = q8_0_inverse(d);
      const uint32_t word = (static_cast<uint32_t>(q8_0_value(f[j].x, id)) & 0xFFu) |
                            (static_cast<uint32_t>(q8_0_value(f[j].y, id)) & 0xFFu) << 8 |
                            (static_cast<uint32_t>(q8_0_value(f[j].z, id)) & 0xFFu) << 16 |
                            (static_cast<uint32_t>(q8_0_value(f[j].w, id)) & 0xFFu) << 24;
      const int r = rows == 1 ? 0 : i / per_row, k = i - r * per_row;
      uint8_t* row = dst + static_cast<size_t>(r) * stride;
      reinterpret_cast<uint32_t*>(row)[k] = word;
      if (k % 8 == 0) reinterpret_cast<float*>(row + n)[k / 8] = round_f16(d);
    }
  }
}

// One Q8_0 group of a row of n values (act_row_stride layout) by a whole warp, lane i holding value i of
// group g: the bytes block_quantize_q8_0 makes of it (the same order-free maximum, scale and values), for a
// producer whose warps hold their output values one a lane (the short conv, decode attention, the routed
// gate/up) and quantize them for the product that reads them next.
__device__ __forceinline__ void warp_quantize_q8_0_group(float v, uint8_t* row, int64_t n, int64_t g) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127;
  row[g * 32 + lane] = static_cast<uint8_t>(q8_0_value(v, q8_0_inverse(d)) & 0xFF);
  if (lane == 0) reinterpret_cast<float*>(row + n)[g] = round_f16(d);
}

}  // namespace df::backend::cuda

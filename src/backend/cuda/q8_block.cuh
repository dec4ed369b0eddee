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
// bytes apart). One thread per 32-value block; every thread of the block must call it, and the caller
// synchronises the block before reading dst.
template <class RowOf>
__device__ __forceinline__ void block_quantize_q8_0(RowOf row_of, int rows, int64_t n, uint8_t* dst,
                                                    size_t stride) {
  const int64_t nb = n / 32;
  for (int64_t i = threadIdx.x; i < rows * nb; i += blockDim.x) {
    const int r = static_cast<int>(i / nb);
    const int64_t b = i % nb;
    const float4* src = reinterpret_cast<const float4*>(row_of(r) + b * 32);
    float v[32];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float4 f = src[k];
      v[4 * k] = f.x;
      v[4 * k + 1] = f.y;
      v[4 * k + 2] = f.z;
      v[4 * k + 3] = f.w;
    }
    // The maximum of the magnitudes does not depend on the order they are met in (fmaxf passes over NaN).
    float amax = fabsf(v[0]);
#pragma unroll
    for (int k = 1; k < 32; ++k) amax = fmaxf(amax, fabsf(v[k]));
    const float d = amax / 127;
    const float id = q8_0_inverse(d);
    uint32_t packed[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        word |= (static_cast<uint32_t>(q8_0_value(v[4 * k + j], id)) & 0xFFu) << (8 * j);
      packed[k] = word;
    }
    uint8_t* row = dst + static_cast<size_t>(r) * stride;
    uint4* q = reinterpret_cast<uint4*>(row + b * 32);
    q[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    q[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    reinterpret_cast<float*>(row + n)[b] = round_f16(d);
  }
}

}  // namespace df::backend::cuda

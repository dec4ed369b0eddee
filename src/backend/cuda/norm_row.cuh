#pragma once
// One row's RMS norm with ggml's CPU numerics (float squares, double sum, float scale, then ⊙ weight), by a
// whole block (rows of up to kNormThreads * kNormPerThread values, in registers) or by one warp (up to
// kNormWarpMax values): the rms_norm kernels and the fused router (norm_route.cu) call the same code, so
// that the fused op's normed rows are the rms_norm op's bits. The sum of squares is reduced as a tree, not
// in index order: its float mean is the CPU's except in the rare case where the double sums differ in the
// last bit and that difference survives rounding to float. store(i, value) receives each normed value.
#include "backend/cuda/device_common.cuh"

namespace df::backend::cuda {

constexpr int kNormThreads = 256, kNormPerThread = 16, kNormWarpMax = 16 * kWarp;

// The row's scale 1/sqrt(mean + eps) from each thread's partial sum of squares: the warps' sums in a fixed
// tree, then the block's, which every thread adds up itself in the same order (the same bits on every
// thread, without a thread's serial sum and a second barrier to share it). Every thread of a kNormThreads
// block must call it; it leaves the shared state free again for the block's next row.
__device__ __forceinline__ float block_rms_scale(double thread_sum, int64_t n, float eps) {
  __shared__ double partial[kNormThreads / kWarp];
  const double sum = warp_sum(thread_sum);
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = sum;
  __syncthreads();
  double t = 0.0;
  for (int k = 0; k < kNormThreads / kWarp; ++k) t += partial[k];
  const float mean = static_cast<float>(t / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  __syncthreads();
  return scale;
}

// Every thread of a kNormThreads block must call it (it synchronises the block). The weight load overlaps
// the reduction.
template <class Store>
__device__ __forceinline__ void block_norm_row(const float* xr, int64_t n, const float* weight, float eps,
                                               Store store) {
  float v[kNormPerThread], w[kNormPerThread];
  double sum = 0.0;
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * kNormThreads;
    v[j] = i < n ? xr[i] : 0.0f;
    w[j] = weight && i < n ? weight[i] : 1.0f;
  }
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) sum += static_cast<double>(__fmul_rn(v[j], v[j]));
  const float scale = block_rms_scale(sum, n, eps);
#pragma unroll
  for (int j = 0; j < kNormPerThread; ++j) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(j) * kNormThreads;
    if (i < n) {
      const float r = v[j] * scale;
      store(i, weight ? r * w[j] : r);  // two roundings, as ggml's rms_norm then mul
    }
  }
}

// Every lane of the warp must call it.
template <class Store>
__device__ __forceinline__ void warp_norm_row(const float* xr, int64_t n, const float* weight, float eps,
                                              Store store) {
  const int lane = threadIdx.x % kWarp;
  float v[kNormWarpMax / kWarp];
  double sum = 0.0;
#pragma unroll
  for (int j = 0; j < kNormWarpMax / kWarp; ++j) {
    const int64_t i = lane + static_cast<int64_t>(j) * kWarp;
    v[j] = i < n ? xr[i] : 0.0f;
    sum += static_cast<double>(__fmul_rn(v[j], v[j]));
  }
  sum = warp_sum(sum);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
#pragma unroll
  for (int j = 0; j < kNormWarpMax / kWarp; ++j) {
    const int64_t i = lane + static_cast<int64_t>(j) * kWarp;
    if (i < n) {
      const float t = v[j] * scale;
      store(i, weight ? t * weight[i] : t);
    }
  }
}

}  // namespace df::backend::cuda

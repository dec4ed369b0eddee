#pragma once
// The F32 product's order, shared by the F32 matmul and the fused router (routing.cu) so that both give the
// same bits: thread t of a T-thread block takes the row's 4-value units t, t+T, ...; each float product is
// rounded to float and summed in double in that order; the lanes' sums then add as a warp tree and the
// warps' sums in index order. The first P units of each thread are loaded before the wait for the previous
// kernel (weights: no kernel writes them).
#include "backend/cuda/device_common.cuh"

namespace df::backend::cuda {

template <int T, int P>
struct F32EarlyUnits {
  float4 v[P];
};

template <int T, int P>
__device__ __forceinline__ F32EarlyUnits<T, P> f32_load_early(const float4* wr, int64_t units) {
  F32EarlyUnits<T, P> early;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t u = threadIdx.x + static_cast<int64_t>(i) * T;
    if (u < units) early.v[i] = wr[u];
  }
  return early;
}

// One unit's four products, in order, into a sum.
__device__ __forceinline__ void f32_unit_add(double& acc, const float4 wv, const float4 a) {
  acc += static_cast<double>(__fmul_rn(wv.x, a.x));
  acc += static_cast<double>(__fmul_rn(wv.y, a.y));
  acc += static_cast<double>(__fmul_rn(wv.z, a.z));
  acc += static_cast<double>(__fmul_rn(wv.w, a.w));
}

// acc[c] += the thread's share of row · act_row(c) for c < nc. act_row(c) gives activation row c as float4s.
template <int T, int P, int NC, class ActRow>
__device__ __forceinline__ void f32_rows_dot(const float4* wr, int64_t units,
                                             const F32EarlyUnits<T, P>& early, int nc, ActRow act_row,
                                             double (&acc)[NC]) {
  const auto add = [&](const float4 wv, int64_t u) {
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c >= nc) break;
      f32_unit_add(acc[c], wv, act_row(c)[u]);
    }
  };
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t u = threadIdx.x + static_cast<int64_t>(i) * T;
    if (u < units) add(early.v[i], u);
  }
  for (int64_t u = threadIdx.x + static_cast<int64_t>(P) * T; u < units; u += T) add(wr[u], u);
}

// NO weight rows against the same activation rows at once (many rows: each activation unit is read once for
// all NO), acc[o * NC + c] += the thread's share of w_row(o) · act_row(c) for c < nc, in the order above.
template <int T, int NO, int NC, class WRow, class ActRow>
__device__ __forceinline__ void f32_multi_rows_dot(WRow w_row, int64_t units, int nc, ActRow act_row,
                                                   double (&acc)[NO * NC]) {
  for (int64_t u = threadIdx.x; u < units; u += T) {
    float4 wv[NO];
#pragma unroll
    for (int o = 0; o < NO; ++o) wv[o] = w_row(o)[u];
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c >= nc) break;
      const float4 a = act_row(c)[u];
#pragma unroll
      for (int o = 0; o < NO; ++o) f32_unit_add(acc[o * NC + c], wv[o], a);
    }
  }
}

// The block's sums: store(c, sum) on thread c for c < nc. Every thread of the block must call it.
template <int T, int NC, class Store>
__device__ __forceinline__ void f32_block_sums(const double (&acc)[NC], int nc, Store store) {
  __shared__ double partial[NC][T / kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const double v = warp_sum(acc[c]);
    if (lane == 0) partial[c][warp] = v;
  }
  __syncthreads();
  if (threadIdx.x < nc) {
    const int c = static_cast<int>(threadIdx.x);
    double t = 0.0;
    for (int k = 0; k < T / kWarp; ++k) t += partial[c][k];
    store(c, t);
  }
}

}  // namespace df::backend::cuda

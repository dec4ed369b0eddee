// RMS norm and RoPE with ggml's CPU numerics (the CPU backend's norm_rope.cpp, operation for operation).
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/q8_block.cuh"

namespace df::backend::cuda {
namespace {

// One block per row. The sum of squares (float squares, double sum) is reduced as a tree rather than in
// index order; its float mean is the CPU's except in the rare case where the double sums differ in the
// last bit and that difference survives rounding to float.
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_kernel(const float* x, int64_t n, const float* weight, float eps, float* y) {
  pdl_begin();
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kNormThreads) sum += static_cast<double>(__fmul_rn(xr[i], xr[i]));
  const float scale = block_rms_scale(sum, n, eps);
  for (int64_t i = threadIdx.x; i < n; i += kNormThreads) {
    const float v = xr[i] * scale;
    yr[i] = weight ? v * weight[i] : v;  // two roundings, as ggml's rms_norm then mul
  }
}

// The same with the row in registers, for rows of up to kNormThreads * kNormPerThread values (norm_row.cuh).
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_regs_kernel(const float* x, int64_t n, const float* weight, float eps, float* y) {
  pdl_begin();
  float* yr = y + blockIdx.x * n;
  block_norm_row(x + blockIdx.x * n, n, weight, eps, [&](int64_t i, float v) { yr[i] = v; });
}

// rms_norm_regs_kernel's row, then the block quantizes it with the products' in-kernel quantizer, so the Q8_0
// bytes are those the products would make. The quantizer reads the normed row from a shared-memory copy
// rather than back from the global writes: those reads waited on L1 misses on the step's critical path.
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_q8_kernel(const float* x, int64_t n, const float* weight, float eps, float* y, uint8_t* q) {
  __shared__ __align__(16) float s_row[kNormThreads * kNormPerThread];
  pdl_begin();
  float* yr = y + blockIdx.x * n;
  block_norm_row(x + blockIdx.x * n, n, weight, eps, [&](int64_t i, float v) {
    yr[i] = v;
    s_row[i] = v;
  });
  __syncthreads();
  const size_t stride = act_row_stride(GgmlType::Q8_0, n);
  block_quantize_q8_0([&](int) -> const float* { return s_row; }, 1, n, q + blockIdx.x * stride, stride);
}

// Short rows (per-head norms: head_dim values): one warp per row (norm_row.cuh).
__global__ void __launch_bounds__(kNormThreads)
    rms_norm_warp_kernel(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y) {
  pdl_begin();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (kNormThreads / kWarp) + threadIdx.x / kWarp;
  if (r >= rows) return;  // the whole warp leaves
  float* yr = y + r * n;
  warp_norm_row(x + r * n, n, weight, eps, [&](int64_t i, float v) { yr[i] = v; });
}

constexpr int kMaxPairs = 512;

// Row r's rotation: the angles by ggml's float recurrence θ_{i+1} = θ_i · theta_scale (sequential, on one
// thread, so bit-identical), then cos/sin per pair into s_cos / s_sin. Every thread of the block must call it
// (it synchronises the block).
__device__ __forceinline__ void rope_row_angles(int32_t position, const RopeArgs& a, float* s_cos,
                                                float* s_sin) {
  __shared__ float s_theta[kMaxPairs];
  const int half = a.n_rot / 2;
  if (threadIdx.x == 0) {
    float t = static_cast<float>(position);
    for (int i = 0; i < half; ++i) {
      s_theta[i] = t;
      t *= a.theta_scale;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float theta_extrap = s_theta[i];
    const float base = a.freq_factors ? theta_extrap / a.freq_factors[i] : theta_extrap;
    const float theta_interp = a.freq_scale * base;
    float theta = theta_interp, m = a.attn_factor;
    if (a.ext_factor != 0.0f) {
      const float y = (static_cast<float>(i) - a.corr_lo) / fmaxf(0.001f, a.corr_hi - a.corr_lo);
      const float ramp_mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * a.ext_factor;
      theta = theta_interp * (1.0f - ramp_mix) + base * ramp_mix;
      m *= a.yarn_mag;
    }
    s_cos[i] = cosf(theta) * m;
    s_sin[i] = sinf(theta) * m;
  }
  __syncthreads();
}

// Pair i of a head: its two dims (NeoX: i and i + half; else 2i and 2i + 1) rotated by pair i's angle.
__device__ __forceinline__ void rope_pair(const RopeArgs& a, int i, float c, float s, const float* in,
                                          float* out) {
  const int half = a.n_rot / 2;
  const int i0 = a.neox ? i : 2 * i, i1 = a.neox ? i + half : 2 * i + 1;
  const float x0 = in[i0], x1 = in[i1];
  out[i0] = x0 * c - x1 * s;
  out[i1] = x0 * s + x1 * c;
}

// One block per row: the row's angles, then every head rotated.
__global__ void rope_kernel(float* x, int n_head, int head_dim, const int32_t* pos, RopeArgs a) {
  pdl_begin();
  __shared__ float s_cos[kMaxPairs], s_sin[kMaxPairs];
  const int half = a.n_rot / 2;
  const int64_t r = blockIdx.x;
  rope_row_angles(pos[r], a, s_cos, s_sin);
  for (int idx = threadIdx.x; idx < n_head * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    float* v = x + (r * n_head + h) * static_cast<int64_t>(head_dim);
    rope_pair(a, i, s_cos[i], s_sin[i], v, v);
  }
}

// rms_norm_warp_kernel's norm then rope_kernel's rotation of every head of up to kNormRopeTasks tensors, in
// place: block (r, y) computes row r's angles and its warps take heads y · warps + warp, ... of the tensors'
// heads in turn, a warp per head (the normed head in shared memory between the two).
constexpr int kNormRopeWarps = kNormThreads / kWarp;
__global__ void __launch_bounds__(kNormThreads)
    norm_rope_kernel(NormRopeArgs na, int heads, const int32_t* pos, RopeArgs a) {
  pdl_begin();
  __shared__ float s_cos[kMaxPairs], s_sin[kMaxPairs];
  __shared__ float s_head[kNormRopeWarps][kNormWarpMax];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int half = a.n_rot / 2, hd = na.head_dim;
  const int64_t r = blockIdx.x;
  rope_row_angles(pos[r], a, s_cos, s_sin);
  float* head = s_head[warp];
  for (int g = blockIdx.y * kNormRopeWarps + warp; g < heads; g += gridDim.y * kNormRopeWarps) {
    int t = 0, h = g;
    while (h >= na.task[t].n_head) h -= na.task[t].n_head, ++t;
    float* v = na.task[t].x + (r * na.task[t].n_head + h) * static_cast<int64_t>(hd);
    warp_norm_row(v, hd, na.task[t].weight, na.eps, [&](int64_t i, float y) { head[i] = y; });
    __syncwarp();
    for (int i = lane; i < half; i += kWarp) rope_pair(a, i, s_cos[i], s_sin[i], head, v);
    for (int i = a.n_rot + lane; i < hd; i += kWarp) v[i] = head[i];  // dims past the rotated ones
    __syncwarp();
  }
}

}  // namespace

void launch_rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y,
                     cudaStream_t stream) {
  if (rows <= 0) return;
  if (n <= kNormWarpMax) {
    constexpr int per_block = kNormThreads / kWarp;
    launch_kernel(rms_norm_warp_kernel, static_cast<unsigned>((rows + per_block - 1) / per_block),
                  kNormThreads, 0, stream, x, rows, n, weight, eps, y);
  } else if (n <= int64_t{kNormThreads} * kNormPerThread) {
    launch_kernel(rms_norm_regs_kernel, static_cast<unsigned>(rows), kNormThreads, 0, stream, x, n, weight,
                  eps, y);
  } else {
    launch_kernel(rms_norm_kernel, static_cast<unsigned>(rows), kNormThreads, 0, stream, x, n, weight, eps,
                  y);
  }
  check_launch("rms_norm kernel");
}

bool rms_norm_q8_shape(int64_t n) {
  return n > kNormWarpMax && n <= int64_t{kNormThreads} * kNormPerThread && n % 32 == 0;
}

void launch_rms_norm_q8(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y,
                        uint8_t* q, cudaStream_t stream) {
  if (rows <= 0) return;
  launch_kernel(rms_norm_q8_kernel, static_cast<unsigned>(rows), kNormThreads, 0, stream, x, n, weight, eps,
                y, q);
  check_launch("rms_norm_q8 kernel");
}

void launch_rope(float* x, int64_t rows, int n_head, int head_dim, const int32_t* pos, const RopeArgs& a,
                 cudaStream_t stream) {
  if (rows <= 0) return;
  launch_kernel(rope_kernel, static_cast<unsigned>(rows), 256, 0, stream, x, n_head, head_dim, pos, a);
  check_launch("rope kernel");
}

bool norm_rope_shape(int head_dim, int n_rot, int n_tasks) {
  return head_dim > 0 && head_dim <= kNormWarpMax && n_rot > 0 && n_rot % 2 == 0 && n_rot <= head_dim &&
         n_rot / 2 <= kMaxPairs && n_tasks >= 1 && n_tasks <= kNormRopeTasks;
}

void launch_norm_rope(const NormRopeArgs& na, int64_t rows, const int32_t* pos, const RopeArgs& a,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  if (!norm_rope_shape(na.head_dim, a.n_rot, na.n_tasks))
    check_cuda(cudaErrorInvalidValue, "norm_rope kernel (a shape norm_rope_shape refuses)");
  int heads = 0;
  for (int t = 0; t < na.n_tasks; ++t) heads += na.task[t].n_head;
  const unsigned per_row = static_cast<unsigned>((heads + kNormRopeWarps - 1) / kNormRopeWarps);
  launch_kernel(norm_rope_kernel, dim3(static_cast<unsigned>(rows), per_row), kNormThreads, 0, stream, na,
                heads, pos, a);
  check_launch("norm_rope kernel");
}

}  // namespace df::backend::cuda

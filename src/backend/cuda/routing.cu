// Expert choice (the CPU backend's routing.cpp): one warp per token row. Probabilities per expert in
// shared memory, k passes of a warp argmax (descending score, lowest id on an exact tie), and the weights'
// sequential double sums on lane 0, as the CPU orders them.
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {
namespace {

constexpr int kGatingSoftmax = 1, kGatingSigmoid = 2, kGatingSoftmaxWeight = 3;

__global__ void route_kernel(RouteArgs a, const float* logits, int32_t* ids, float* weights) {
  pdl_begin();
  extern __shared__ float s[];  // probs[E], score[E], taken[E] (as floats)
  const int E = a.n_expert, k = a.k, lane = threadIdx.x;
  float* probs = s;
  float* score = s + E;
  float* taken = s + 2 * E;
  const float* l = logits + static_cast<int64_t>(blockIdx.x) * E;
  int32_t* id = ids + static_cast<int64_t>(blockIdx.x) * k;
  float* w = weights + static_cast<int64_t>(blockIdx.x) * k;

  if (a.gating == kGatingSigmoid) {
    for (int e = lane; e < E; e += kWarp) probs[e] = 1.0f / (1.0f + expf(-l[e]));
  } else if (a.gating == kGatingSoftmax) {
    float m = -INFINITY;
    for (int e = lane; e < E; e += kWarp) m = fmaxf(m, l[e]);
    m = warp_max(m);
    double sum = 0.0;
    for (int e = lane; e < E; e += kWarp) {
      probs[e] = expf(l[e] - m);
      sum += static_cast<double>(probs[e]);
    }
    sum = warp_sum(sum);
    const float inv = static_cast<float>(1.0 / sum);
    for (int e = lane; e < E; e += kWarp) probs[e] *= inv;
  } else {
    for (int e = lane; e < E; e += kWarp) probs[e] = l[e];  // SoftmaxWeight: top-k of the raw logits
  }
  for (int e = lane; e < E; e += kWarp) {
    score[e] =
        a.gating != kGatingSoftmaxWeight && a.selection_bias ? probs[e] + a.selection_bias[e] : probs[e];
    taken[e] = 0.0f;
  }
  __syncwarp();
  for (int j = 0; j < k; ++j) {
    int best = -1;
    float best_s = 0.0f;
    for (int e = lane; e < E; e += kWarp)
      if (taken[e] == 0.0f && (best < 0 || score[e] > best_s)) {
        best = e;
        best_s = score[e];
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const int ob = __shfl_xor_sync(0xffffffffu, best, o);
      const float os = __shfl_xor_sync(0xffffffffu, best_s, o);
      if (ob >= 0 && (best < 0 || os > best_s || (os == best_s && ob < best))) {
        best = ob;
        best_s = os;
      }
    }
    if (lane == 0) {
      id[j] = best;
      w[j] = probs[best];
      taken[best] = 1.0f;
    }
    __syncwarp();
  }
  if (lane != 0) return;
  if (a.gating == kGatingSoftmaxWeight) {
    const float max = w[0];
    double sum = 0.0;
    for (int j = 0; j < k; ++j) {
      w[j] = expf(w[j] - max);
      sum += static_cast<double>(w[j]);
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < k; ++j) w[j] *= inv;
    return;
  }
  if (a.normalize) {
    double sum = 0.0;
    for (int j = 0; j < k; ++j) sum += static_cast<double>(w[j]);
    const float sc = fmaxf(static_cast<float>(sum), 6.103515625e-5f);
    for (int j = 0; j < k; ++j) w[j] /= sc;
  }
  if (a.scale != 0.0f && a.scale != 1.0f)
    for (int j = 0; j < k; ++j) w[j] *= a.scale;
}

// x[r][i] += Σ_j weights[r][j] · expert_out[r][j][i], the sum in slot order, as the CPU forms it.
__global__ void moe_combine_add_kernel(const float* expert_out, const float* weights, int64_t rows, int k,
                                       int64_t n, float* x) {
  pdl_begin();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * n) return;
  const int64_t r = idx / n, i = idx % n;
  const float* w = weights + r * k;
  const float* e = expert_out + r * k * n + i;
  float o = e[0] * w[0];
  for (int j = 1; j < k; ++j) o = o + e[j * n] * w[j];
  x[idx] = x[idx] + o;
}

}  // namespace

void launch_route(const RouteArgs& a, const float* logits, int64_t rows, int32_t* ids, float* weights,
                  cudaStream_t stream) {
  if (rows <= 0) return;
  launch_kernel(route_kernel, static_cast<unsigned>(rows), kWarp,
                static_cast<size_t>(a.n_expert) * 3 * sizeof(float), stream, a, logits, ids, weights);
  check_launch("route kernel");
}

void launch_moe_combine_add(const float* expert_out, const float* weights, int64_t rows, int k, int64_t n,
                            float* x, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  const int64_t total = rows * n;
  launch_kernel(moe_combine_add_kernel, static_cast<unsigned>((total + 255) / 256), 256, 0, stream,
                expert_out, weights, rows, k, n, x);
  check_launch("moe_combine_add kernel");
}

}  // namespace df::backend::cuda

// Expert choice (the CPU backend's routing.cpp): one warp per token row. Each pick of the top-k follows the
// CPU's scan (descending score, the lowest id on an exact tie, a NaN score chosen only where it is the first
// expert not yet taken), the weights' sums are sequential doubles in pick order, as the CPU orders them.
#include <cooperative_groups.h>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/f32_dot.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/q8_block.cuh"

namespace df::backend::cuda {
namespace {

constexpr int kGatingSoftmax = 1, kGatingSigmoid = 2, kGatingSoftmaxWeight = 3;

// A score as an unsigned key in the order of `>`: +0 and -0 one key, NaN 0 (below every other key, so it
// never wins a maximum).
__device__ __forceinline__ uint32_t score_key(float s) {
  const uint32_t u = s == 0.0f ? 0u : __float_as_uint(s);
  return s != s ? 0u : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// One pick of the top-k as the CPU's scan makes it (best = the first expert not yet taken, replaced by each
// later one whose score is greater): the first untaken expert if its score is NaN, else the highest score
// that is not NaN, the lowest id among equals. Each lane offers its untaken experts in increasing id order;
// winner() combines the lanes with three warp reductions (no shared memory, no chain of shuffles).
struct LanePick {
  uint32_t first = 0xFFFFFFFFu;  // (the lane's lowest untaken id << 1) | its score is NaN
  uint32_t key = 0, id = 0xFFFFFFFFu;
  // Expert e (offered in increasing order) whose score has score_key k (0: NaN).
  __device__ __forceinline__ void offer(int e, uint32_t k) {
    if (first == 0xFFFFFFFFu) first = static_cast<uint32_t>(e) << 1 | (k == 0u ? 1u : 0u);
    if (k > key) {
      key = k;
      id = static_cast<uint32_t>(e);
    }
  }
  __device__ __forceinline__ int winner() const {
    const uint32_t f = __reduce_min_sync(0xffffffffu, first);
    const uint32_t m = __reduce_max_sync(0xffffffffu, key);
    const uint32_t w = __reduce_min_sync(0xffffffffu, key == m ? id : 0xFFFFFFFFu);
    return static_cast<int>((f & 1u) || m == 0u ? f >> 1 : w);
  }
};

// One token row's choice by one warp: l its n_expert logits (read past L1 with kPastL1: another block of the
// kernel wrote them), id and w its k results, s route_smem_bytes of the warp's shared memory (16-byte
// aligned). The choices are kept there and written out once at the end (a chain of global stores and loads
// on one lane is what made this slow). Every lane of the warp must call it.
//
// Session 29: the picks by LanePick's three warp reductions, the logits read straight into the
// probabilities, +3-5 % decode on lfm2-24b (H100). The same route with every value in registers (experts
// lane + 32 i in unrolled arrays, up to 256) decoded 10 % slower than before, for reasons not found.
__device__ __host__ constexpr size_t route_smem_bytes(int64_t E, int64_t k) {
  return (static_cast<size_t>(2 * E + 2 * k) * sizeof(float) + static_cast<size_t>(E) + 15) / 16 * 16;
}
template <bool kPastL1>
__device__ void warp_route_row(const RouteArgs& a, const float* l, int32_t* id, float* w, float* s) {
  const int E = a.n_expert, k = a.k, lane = threadIdx.x % kWarp;
  float* probs = s;
  uint32_t* key = reinterpret_cast<uint32_t*>(s + E);  // score_key of each expert's score
  float* pick_w = s + 2 * E;
  int32_t* pick_id = reinterpret_cast<int32_t*>(pick_w + k);
  uint8_t* taken = reinterpret_cast<uint8_t*>(pick_id + k);
  for (int e = lane; e < E; e += kWarp) probs[e] = kPastL1 ? __ldcg(l + e) : l[e];
  if (a.gating == kGatingSigmoid) {
    for (int e = lane; e < E; e += kWarp) probs[e] = 1.0f / (1.0f + expf(-probs[e]));
  } else if (a.gating == kGatingSoftmax) {
    float m = -INFINITY;
    for (int e = lane; e < E; e += kWarp) m = fmaxf(m, probs[e]);
    m = warp_max(m);
    double sum = 0.0;
    for (int e = lane; e < E; e += kWarp) {
      probs[e] = expf(probs[e] - m);
      sum += static_cast<double>(probs[e]);
    }
    sum = warp_sum(sum);
    const float inv = static_cast<float>(1.0 / sum);
    for (int e = lane; e < E; e += kWarp) probs[e] *= inv;
  }  // SoftmaxWeight: top-k of the raw logits
  for (int e = lane; e < E; e += kWarp) {
    key[e] = score_key(a.gating != kGatingSoftmaxWeight && a.selection_bias ? probs[e] + a.selection_bias[e]
                                                                            : probs[e]);
    taken[e] = 0;
  }
  __syncwarp();
  for (int j = 0; j < k; ++j) {
    LanePick pick;
    for (int e = lane; e < E; e += kWarp)
      if (taken[e] == 0) pick.offer(e, key[e]);
    const int best = pick.winner();
    if (lane == 0) {
      pick_id[j] = best;
      pick_w[j] = probs[best];
      taken[best] = 1;
    }
    __syncwarp();
  }
  if (lane != 0) return;
  if (a.gating == kGatingSoftmaxWeight) {
    const float max = pick_w[0];
    double sum = 0.0;
    for (int j = 0; j < k; ++j) {
      pick_w[j] = expf(pick_w[j] - max);
      sum += static_cast<double>(pick_w[j]);
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < k; ++j) pick_w[j] *= inv;
  } else {
    if (a.normalize) {
      double sum = 0.0;
      for (int j = 0; j < k; ++j) sum += static_cast<double>(pick_w[j]);
      const float sc = fmaxf(static_cast<float>(sum), 6.103515625e-5f);
      for (int j = 0; j < k; ++j) pick_w[j] /= sc;
    }
    if (a.scale != 0.0f && a.scale != 1.0f)
      for (int j = 0; j < k; ++j) pick_w[j] *= a.scale;
  }
  for (int j = 0; j < k; ++j) {
    id[j] = pick_id[j];
    w[j] = pick_w[j];
  }
}

__global__ void route_kernel(RouteArgs a, const float* logits, int32_t* ids, float* weights) {
  pdl_begin();
  extern __shared__ float s[];  // warp_route_row's
  const int64_t r = blockIdx.x;
  warp_route_row<false>(a, logits + r * a.n_expert, ids + r * a.k, weights + r * a.k, s);
}

// The fused router (CudaBackend::norm_route): a block per expert row of the F32 router. Each block norms the
// token rows into its shared memory with the rms_norm kernels' code (block 0 also writes them out as xn),
// forms its expert's logits with matmul.cu's F32 product (the same per-thread units, double sums and tree,
// so the same bits), and the block that finishes last (a counter in device memory, which it resets) routes
// every row with route_kernel's code. The router row's first units load before the wait for the previous
// kernel (weights: no kernel writes them).
constexpr int kRouterPrefetch = 2;
__global__ void __launch_bounds__(kNormThreads) norm_route_kernel(NormRouteArgs a) {
  extern __shared__ __align__(16) float sm[];  // rows × n normed values, then per row the route's scratch
  __shared__ bool last;
  const int64_t n = a.n, E = a.route.n_expert, e = blockIdx.x;
  const int rows = a.rows, warp = threadIdx.x / kWarp;
  const float4* wr = reinterpret_cast<const float4*>(a.router + e * n);
  const auto early = f32_load_early<kNormThreads, kRouterPrefetch>(wr, n / 4);
  pdl_begin();
  float* xs = sm;
  if (n <= kNormWarpMax) {
    if (warp < rows)
      warp_norm_row(a.x + warp * n, n, a.norm, a.eps, [&](int64_t i, float v) {
        xs[warp * n + i] = v;
        if (e == 0) a.xn[warp * n + i] = v;
      });
  } else {
    for (int c = 0; c < rows; ++c)
      block_norm_row(a.x + c * n, n, a.norm, a.eps, [&](int64_t i, float v) {
        xs[c * n + i] = v;
        if (e == 0) a.xn[c * n + i] = v;
      });
  }
  __syncthreads();
  double acc[kNormRouteMaxRows];
#pragma unroll
  for (int c = 0; c < kNormRouteMaxRows; ++c) acc[c] = 0.0;
  f32_rows_dot(
      wr, n / 4, early, rows, [&](int c) { return reinterpret_cast<const float4*>(xs + c * n); }, acc);
  f32_block_sums<kNormThreads>(acc, rows,
                               [&](int c, double t) { a.logits[c * E + e] = static_cast<float>(t); });
  // This block's logits (written by its first threads) before its count: the barrier orders them before
  // thread 0's fence, which makes them visible device-wide (cooperative groups' grid barrier does the same),
  // rather than a fence on every thread.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(a.counter, 1u) == gridDim.x - 1;
    if (last) __threadfence();  // every block's logits, for the whole block after the barrier
  }
  __syncthreads();
  if (!last) return;
  if (warp < rows) {
    // The row's logits, read past L1 (other blocks wrote them).
    float* s = sm + rows * n + warp * static_cast<int64_t>(route_smem_bytes(E, a.route.k) / sizeof(float));
    warp_route_row<true>(a.route, a.logits + warp * E, a.ids + warp * a.route.k, a.weights + warp * a.route.k,
                         s);
  }
  if (threadIdx.x == 0) *a.counter = 0;
}

// The fused router of one token row (decode) as one cluster of kRouteCluster blocks (sm_90 thread block
// clusters): block b norms the row as norm_route_kernel's blocks do, forms the logits of experts b·EPB ..
// b·EPB + EPB - 1 in the F32 product's order (so the same bits), and writes them into block 0's shared memory
// (distributed shared memory); after the cluster's barrier block 0 routes from there with route_kernel's
// code. No device-wide fence, counter or re-read of the logits through L2, which made norm_route_kernel's
// last block a chain of latencies (docs/PERF.md, session 35: 6.9 us a call in the step, 14 % of it).
constexpr int kRouteCluster = 16, kRouteClusterMaxPerBlock = 8;
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}
template <int EPB>
__global__ void __launch_bounds__(kNormThreads) norm_route_cluster_kernel(NormRouteArgs a) {
  extern __shared__ __align__(16) float sm[];  // the n normed values, then (block 0) the route's scratch
  __shared__ float s_logits[kRouteCluster * kRouteClusterMaxPerBlock];
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  // Paired with the wait before the first remote write, which then finds every block of the cluster started.
  cluster_arrive_relaxed();
  const int64_t n = a.n, units = n / 4;
  const int rank = static_cast<int>(cluster.block_rank()), e0 = rank * EPB;
  const float4* wr[EPB];
  F32EarlyUnits<kNormThreads, kRouterPrefetch> early[EPB];
#pragma unroll
  for (int o = 0; o < EPB; ++o) {
    wr[o] = reinterpret_cast<const float4*>(a.router + (e0 + o) * n);
    early[o] = f32_load_early<kNormThreads, kRouterPrefetch>(wr[o], units);
  }
  pdl_begin();
  float* xs = sm;
  block_norm_row(a.x, n, a.norm, a.eps, [&](int64_t i, float v) {
    xs[i] = v;
    if (rank == 0) a.xn[i] = v;
  });
  __syncthreads();
  double acc[EPB];
#pragma unroll
  for (int o = 0; o < EPB; ++o) {
    double one[1] = {0.0};
    f32_rows_dot(
        wr[o], units, early[o], 1, [&](int) { return reinterpret_cast<const float4*>(xs); }, one);
    acc[o] = one[0];
  }
  cluster_wait();
  float* leader_logits = cluster.map_shared_rank(s_logits, 0);
  f32_block_sums<kNormThreads>(acc, EPB, [&](int o, double t) {
    const float v = static_cast<float>(t);
    a.logits[e0 + o] = v;
    leader_logits[e0 + o] = v;
  });
  cluster.sync();  // every block's logits in block 0's shared memory
  if (rank != 0) {
    // The other blocks quantize the normed row for the routed gate/up while block 0 routes: a warp a 32-value
    // group, from this block's copy of the row.
    if (a.xq) {
      constexpr int kWarps = kNormThreads / kWarp;
      const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
      for (int64_t g = (rank - 1) * kWarps + warp; g < n / 32; g += (kRouteCluster - 1) * kWarps)
        warp_quantize_q8_0_group(xs[g * 32 + lane], a.xq, n, g);
    }
    return;
  }
  if (threadIdx.x < kWarp) warp_route_row<false>(a.route, s_logits, a.ids, a.weights, sm + n);
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
  launch_kernel(route_kernel, static_cast<unsigned>(rows), kWarp, route_smem_bytes(a.n_expert, a.k), stream,
                a, logits, ids, weights);
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

size_t norm_route_smem_bytes(int64_t rows, int64_t n, int n_expert, int k) {
  return static_cast<size_t>(rows) * (static_cast<size_t>(n) * sizeof(float) + route_smem_bytes(n_expert, k));
}

bool norm_route_fused(int64_t rows, int64_t n, int n_expert, int k) {
  return rows >= 1 && rows <= kNormRouteMaxRows && n % 4 == 0 && n_expert % 4 == 0 &&
         n <= int64_t{kNormThreads} * kNormPerThread &&
         norm_route_smem_bytes(rows, n, n_expert, k) <= kNormRouteMaxSmem;
}

// Whether norm_route_cluster_kernel<EPB> can run here (clusters of kRouteCluster blocks, beyond the portable
// 8, need the device's consent), asked once.
template <int EPB>
bool route_cluster_launchable() {
  static const bool ok = [] {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(kRouteCluster);
    cfg.blockDim = dim3(kNormThreads);
    cfg.dynamicSmemBytes = kNormRouteMaxSmem / 2;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim = {kRouteCluster, 1, 1};
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaFuncSetAttribute(norm_route_cluster_kernel<EPB>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                             1) != cudaSuccess ||
        cudaOccupancyMaxActiveClusters(&clusters, norm_route_cluster_kernel<EPB>, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // not an error of the next launch
      return false;
    }
    return clusters > 0;
  }();
  return ok;
}
// f(norm_route_cluster_kernel<EPB>) where the cluster kernel serves `a` (one row, n_expert = kRouteCluster ·
// EPB for EPB <= kRouteClusterMaxPerBlock, clusters available); false where it does not.
template <int EPB = 1, class F>
bool with_route_cluster(const NormRouteArgs& a, F&& f) {
  if constexpr (EPB > kRouteClusterMaxPerBlock) {
    return false;
  } else {
    if (a.rows != 1 || a.route.n_expert != kRouteCluster * EPB) return with_route_cluster<EPB + 1>(a, f);
    if (!route_cluster_launchable<EPB>()) return false;
    f(norm_route_cluster_kernel<EPB>);
    return true;
  }
}

bool norm_route_quantizes(int64_t rows, int64_t n, int n_expert) {
  NormRouteArgs a{};
  a.rows = rows;
  a.n = n;
  a.route.n_expert = n_expert;
  return n % 32 == 0 && with_route_cluster(a, [](void (*)(NormRouteArgs)) {});
}

void launch_norm_route(const NormRouteArgs& a, cudaStream_t stream) {
  const size_t smem = norm_route_smem_bytes(a.rows, a.n, a.route.n_expert, a.route.k);
  if (with_route_cluster(a, [&](void (*kernel)(NormRouteArgs)) {
        launch_kernel_in_clusters(kRouteCluster, kernel, dim3(kRouteCluster), kNormThreads, smem, stream, a);
      })) {
    check_launch("norm_route kernel (cluster)");
    return;
  }
  launch_kernel(norm_route_kernel, static_cast<unsigned>(a.route.n_expert), kNormThreads, smem, stream, a);
  check_launch("norm_route kernel");
}

}  // namespace df::backend::cuda

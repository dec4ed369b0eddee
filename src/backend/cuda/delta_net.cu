// qwen35moe's gated delta-net (the CPU backend's delta_net.cpp): the causal conv + SiLU, the gated delta rule
// (token by token for decode, in chunks for prefill), and the sigmoid gate product.
#include <algorithm>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {
namespace {

// ---- delta_net_conv: the same structure as short_conv.cu. A token's output needs the raw inputs of the taps
// - 1 tokens before it (this batch's rows or the state), never outputs, so every (token, channel) is its own
// thread, summing in the CPU's order (taps oldest first, in float).

__device__ __forceinline__ float conv_input(const float* u, int64_t channels, const float* state,
                                            int hist_len, int64_t s, int64_t c) {
  return s < 0 ? state[(hist_len + s) * channels + c] : u[s * channels + c];
}

__device__ __forceinline__ void conv_silu_row(const float* u, int64_t channels, const float* w, int hist_len,
                                              const float* state, int64_t t, int64_t c, float* y) {
  float sum = 0.0f;
  for (int j = 0; j < hist_len; ++j)
    sum += conv_input(u, channels, state, hist_len, t - hist_len + j, c) * w[j];
  sum += u[t * channels + c] * w[hist_len];
  y[t * channels + c] = sum / (1.0f + expf(-sum));  // ggml's scalar silu
}

// Ascending, each slot reads a later slot of the old state (rows >= 1), which is not yet overwritten.
__device__ __forceinline__ void conv_advance_state(const float* u, int64_t rows, int64_t channels,
                                                   int hist_len, float* state, int64_t c) {
  for (int i = 0; i < hist_len; ++i)
    state[i * channels + c] = conv_input(u, channels, state, hist_len, rows - hist_len + i, c);
}

__global__ void delta_net_conv_kernel(const float* u, int64_t rows, int64_t channels, const float* conv_w,
                                      int taps, const float* state, float* y) {
  pdl_begin();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  for (int64_t t = blockIdx.y; t < rows; t += gridDim.y)
    conv_silu_row(u, channels, conv_w + c * taps, taps - 1, state, t, c, y);
}

// A few tokens (decode): a thread per channel computes its outputs and then advances its channel's state,
// one launch instead of two.
constexpr int64_t kFusedConvRows = 8;
__global__ void delta_net_conv_fused_kernel(const float* u, int64_t rows, int64_t channels,
                                            const float* conv_w, int taps, float* state, float* y) {
  pdl_begin();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  for (int64_t t = 0; t < rows; ++t) conv_silu_row(u, channels, conv_w + c * taps, taps - 1, state, t, c, y);
  conv_advance_state(u, rows, channels, taps - 1, state, c);
}

__global__ void delta_net_conv_state_kernel(const float* u, int64_t rows, int64_t channels, int taps,
                                            float* state) {
  pdl_begin();
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < channels) conv_advance_state(u, rows, channels, taps - 1, state, c);
}

// ---- gated_delta_net. Each value column j of a head's state (row j of its d × d matrix in memory) evolves
// on its own given the token's normalised q and k: δ_j and out_j read only that row. So a warp owns
// kColsPerWarp columns of one head for the whole batch, keeps them in registers (lane l holds key dims
// l, l + 32, ...), and walks the tokens in order; the state is read and written once per call however many
// tokens it has. Every warp normalises q and k itself (from L1/L2), so no block ever synchronises. A decode
// step (one token) reads and writes each state matrix once, spread over n_v × d / kColsPerWarp warps.
constexpr int kColsPerWarp = 4;
constexpr int kWarpsPerBlock = 4;
constexpr int kColsPerBlock = kColsPerWarp * kWarpsPerBlock;

template <int N>
__device__ __forceinline__ void warp_sum_each(float (&v)[N]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int c = 0; c < N; ++c) v[c] += __shfl_xor_sync(0xffffffffu, v[c], o);
}

// x / max(sqrt(Σx²), eps) over a head spread over the warp (zeros past d), the sum in double and the square
// root in float as ggml_l2_norm does.
template <int kPerLane>
__device__ __forceinline__ void l2_normalize(float (&x)[kPerLane], float eps) {
  double sum = 0.0;
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) sum += static_cast<double>(x[m] * x[m]);
  sum = warp_sum(sum);
  const float scale = 1.0f / fmaxf(sqrtf(static_cast<float>(sum)), eps);
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) x[m] *= scale;
}

// What a warp reads of one token: its lanes' dims of the q and k heads, its columns' v, the head's gates.
template <int kPerLane>
struct TokenInputs {
  float q[kPerLane], k[kPerLane], v[kColsPerWarp];
  float alpha, beta;
};

template <int kPerLane>
__device__ __forceinline__ void load_token(const DeltaNetArgs& a, const float* qkv, const float* alpha,
                                           const float* beta, int64_t t, int h, int j0, int lane,
                                           TokenInputs<kPerLane>& in) {
  const int d = a.head_dim, kh = h % a.n_k;
  const float* row = qkv + t * static_cast<int64_t>(2 * a.n_k + a.n_v) * d;
  const float* q = row + kh * d;
  const float* k = row + (a.n_k + kh) * d;
  const float* v = row + (2 * a.n_k + h) * d;
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int i = lane + m * kWarp;
    in.q[m] = i < d ? q[i] : 0.0f;
    in.k[m] = i < d ? k[i] : 0.0f;
  }
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c) in.v[c] = j0 + c < d ? v[j0 + c] : 0.0f;
  in.alpha = alpha[t * a.n_v + h];
  in.beta = beta[t * a.n_v + h];
}

// kPerLane = ceil(d / 32) rounded up to a power of two (one instantiation each); lanes past d hold zeros.
template <int kPerLane>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    gated_delta_net_kernel(DeltaNetArgs a, const float* qkv, const float* alpha, const float* beta,
                           int64_t rows, float* state, float* out) {
  pdl_begin();
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int h = static_cast<int>(blockIdx.x), d = a.head_dim;
  const int j0 =
      (static_cast<int>(blockIdx.y) * kWarpsPerBlock + static_cast<int>(threadIdx.x) / kWarp) * kColsPerWarp;
  if (j0 >= d) return;  // whole warps only: the shuffles below see all 32 lanes
  float* S = state + static_cast<int64_t>(h) * d * d;
  float s[kColsPerWarp][kPerLane];  // s[c][m] = S_h[lane + 32 m][j0 + c]
#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c)
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) {
      const int i = lane + m * kWarp;
      s[c][m] = j0 + c < d && i < d ? S[(j0 + c) * d + i] : 0.0f;
    }
  const float dt_bias = a.dt_bias[h], ssm_a = a.ssm_a[h];

  TokenInputs<kPerLane> cur;
  load_token(a, qkv, alpha, beta, 0, h, j0, lane, cur);
  for (int64_t t = 0; t < rows; ++t) {
    // The next token's loads are in flight while this one's arithmetic runs.
    TokenInputs<kPerLane> next = cur;
    if (t + 1 < rows) load_token(a, qkv, alpha, beta, t + 1, h, j0, lane, next);

    l2_normalize(cur.q, a.eps);
    l2_normalize(cur.k, a.eps);
    const float b = 1.0f / (1.0f + expf(-cur.beta));
    const float x = cur.alpha + dt_bias;
    const float g = (x > 20.0f ? x : logf(1.0f + expf(x))) * ssm_a;
    const float decay = expf(g);

    float sk[kColsPerWarp];  // Σ_i S[i][j] k_i after the decay
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      sk[c] = 0.0f;
#pragma unroll
      for (int m = 0; m < kPerLane; ++m) {
        s[c][m] *= decay;
        sk[c] += s[c][m] * cur.k[m];
      }
    }
    warp_sum_each(sk);
    float sq[kColsPerWarp];  // Σ_i S[i][j] q_i after the update
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c) {
      const float delta = (cur.v[c] - sk[c]) * b;
      sq[c] = 0.0f;
#pragma unroll
      for (int m = 0; m < kPerLane; ++m) {
        s[c][m] += cur.k[m] * delta;
        sq[c] += s[c][m] * cur.q[m];
      }
    }
    warp_sum_each(sq);
    float* o = out + (t * a.n_v + h) * d;
#pragma unroll
    for (int c = 0; c < kColsPerWarp; ++c)
      if (lane == c && j0 + c < d) o[j0 + c] = sq[c] * a.out_scale;
    cur = next;
  }

#pragma unroll
  for (int c = 0; c < kColsPerWarp; ++c)
#pragma unroll
    for (int m = 0; m < kPerLane; ++m) {
      const int i = lane + m * kWarp;
      if (j0 + c < d && i < d) S[(j0 + c) * d + i] = s[c][m];
    }
}

// ---- The chunked form for prefill (tests/delta_net_reference.h derives it; llama.cpp's
// build_delta_net_chunking): per chunk of kChunk tokens, with G the cumulative log decay,
//   (I + A) δ = R,  A[r][s] = β_r e^{G_r−G_s} k_r·k_s (s < r),  R_r = β_r (v_r − e^{G_r} Sᵀk_r),
//   out_r = (e^{G_r} Sᵀq_r + Σ_{s≤r} e^{G_r−G_s} (q_r·k_s) δ_s) / sqrt(d),
//   S ← e^{G_last} S + Σ_s e^{G_last−G_s} k_s δ_sᵀ,
// so the tokens of a chunk are matrix products and one triangular solve instead of a walk. δ is solved
// for directly by forward substitution (δ = (I + A)⁻¹ R, which llama.cpp forms as U − W S with
// T = (I + A)⁻¹): the same algebra without forming T. A block owns one head's kChunkCols value columns
// for the whole batch: its state slice stays in shared memory from the first chunk to the last, and lane c
// of every warp works on column j0 + c. The q / k work of a chunk (normalisation, A, the q·k products)
// does not depend on the columns and is repeated by the head's d / kChunkCols blocks, which keeps every
// block independent (no scratch memory, no second launch).
constexpr int kChunk = 64;
constexpr int kChunkCols = kWarp;
constexpr int kChunkWarps = 8;
constexpr int kStateLd =
    kChunkCols + 1;  // the state slice's row stride: its loads and stores do not conflict

size_t chunked_smem_bytes(int d) {
  const size_t ld = static_cast<size_t>(d) + 1;  // odd: lanes reading rows s = lane hit distinct banks
  const size_t floats = 2 * kChunk * ld + 2 * kChunk * kChunk + static_cast<size_t>(d) * kStateLd +
                        2 * kChunk * kChunkCols + 3 * kChunk;
  return floats * sizeof(float);
}

__global__ void __launch_bounds__(kChunkWarps* kWarp)
    gated_delta_net_chunked_kernel(DeltaNetArgs a, const float* qkv, const float* alpha, const float* beta,
                                   int64_t rows, float* state, float* out) {
  pdl_begin();
  extern __shared__ float smem[];
  const int d = a.head_dim, ld = d + 1;
  const int h = static_cast<int>(blockIdx.x), kh = h % a.n_k;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
  const int j0 = static_cast<int>(blockIdx.y) * kChunkCols, j = j0 + lane;
  const int64_t C = static_cast<int64_t>(2 * a.n_k + a.n_v) * d;
  float* q_s = smem;                           // kChunk × ld: the chunk's q rows, normalised
  float* k_s = q_s + kChunk * ld;              // kChunk × ld: its k rows, normalised
  float* a_s = k_s + kChunk * ld;              // kChunk × kChunk: A (zero on and above the diagonal)
  float* p_s = a_s + kChunk * kChunk;          // kChunk × kChunk: e^{G_r−G_s} q_r·k_s (zero above)
  float* s_s = p_s + kChunk * kChunk;          // d × kStateLd: S[i][j0 + c]
  float* delta = s_s + d * kStateLd;           // kChunk × kChunkCols: R, then δ in place
  float* inter = delta + kChunk * kChunkCols;  // kChunk × kChunkCols: e^{G_r} Sᵀq_r
  float* G = inter + kChunk * kChunkCols;      // kChunk: g, then its cumulative sum
  float* b = G + kChunk;                       // kChunk: β
  float* to_end = b + kChunk;                  // kChunk: e^{G_last − G_s}

  float* S = state + static_cast<int64_t>(h) * d * d;
  for (int idx = tid; idx < kChunkCols * d; idx += blockDim.x) {
    const int c = idx / d, i = idx % d;
    s_s[i * kStateLd + c] = j0 + c < d ? S[(j0 + c) * d + i] : 0.0f;
  }
  const float dt_bias = a.dt_bias[h], ssm_a = a.ssm_a[h];
  for (int64_t t0 = 0; t0 < rows; t0 += kChunk) {
    const int n = rows - t0 < kChunk ? static_cast<int>(rows - t0) : kChunk;
    for (int idx = tid; idx < n * d; idx += blockDim.x) {
      const int r = idx / d, i = idx % d;
      const float* row = qkv + (t0 + r) * C;
      q_s[r * ld + i] = row[kh * d + i];
      k_s[r * ld + i] = row[(a.n_k + kh) * d + i];
    }
    if (tid < n) {
      const int64_t t = t0 + tid;
      b[tid] = 1.0f / (1.0f + expf(-beta[t * a.n_v + h]));
      const float x = alpha[t * a.n_v + h] + dt_bias;
      G[tid] = (x > 20.0f ? x : logf(1.0f + expf(x))) * ssm_a;
    }
    __syncthreads();

    // ggml_l2_norm of every q and k row, a warp per row; the decays summed in token order.
    for (int r = warp; r < 2 * n; r += kChunkWarps) {
      float* x = r < n ? q_s + r * ld : k_s + (r - n) * ld;
      double sum = 0.0;
      for (int i = lane; i < d; i += kWarp) sum += static_cast<double>(x[i] * x[i]);
      sum = warp_sum(sum);
      const float scale = 1.0f / fmaxf(sqrtf(static_cast<float>(sum)), a.eps);
      for (int i = lane; i < d; i += kWarp) x[i] *= scale;
    }
    if (tid == 0) {
      float cum = 0.0f;
      for (int r = 0; r < n; ++r) G[r] = cum += G[r];
    }
    __syncthreads();

    // A and the decayed q·k (row r per warp, s per lane), then R and the state's share of the outputs (row r
    // per warp, column per lane).
    if (tid < n) to_end[tid] = expf(G[n - 1] - G[tid]);
    for (int r = warp; r < n; r += kChunkWarps) {
      const float* kr = k_s + r * ld;
      const float* qr = q_s + r * ld;
      for (int s = lane; s < kChunk; s += kWarp) {
        float kk = 0.0f, qk = 0.0f;
        if (s <= r) {
          const float* ks = k_s + s * ld;
          for (int i = 0; i < d; ++i) {
            kk += kr[i] * ks[i];
            qk += qr[i] * ks[i];
          }
        }
        const float decay = s <= r ? expf(G[r] - G[s]) : 0.0f;
        a_s[r * kChunk + s] = s < r ? b[r] * decay * kk : 0.0f;
        p_s[r * kChunk + s] = decay * qk;
      }
      float sk = 0.0f, sq = 0.0f;
      for (int i = 0; i < d; ++i) {
        const float sij = s_s[i * kStateLd + lane];
        sk += kr[i] * sij;
        sq += qr[i] * sij;
      }
      const float eg = expf(G[r]);
      const float v = j < d ? qkv[(t0 + r) * C + (2 * a.n_k + h) * d + j] : 0.0f;
      delta[r * kChunkCols + lane] = b[r] * (v - eg * sk);
      inter[r * kChunkCols + lane] = eg * sq;
    }
    __syncthreads();

    // δ_r = R_r − Σ_{s<r} A[r][s] δ_s: each lane walks its own column's rows in order (no other thread
    // reads them until the barrier), four partial sums for the latency.
    if (warp == 0) {
      for (int r = 1; r < n; ++r) {
        const float* ar = a_s + r * kChunk;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int s = 0;
        for (; s + 4 <= r; s += 4)
#pragma unroll
          for (int u = 0; u < 4; ++u) acc[u] += ar[s + u] * delta[(s + u) * kChunkCols + lane];
        for (; s < r; ++s) acc[0] += ar[s] * delta[s * kChunkCols + lane];
        delta[r * kChunkCols + lane] -= (acc[0] + acc[1]) + (acc[2] + acc[3]);
      }
    }
    __syncthreads();

    // The outputs, then the state the next chunk starts from.
    for (int r = warp; r < n; r += kChunkWarps) {
      const float* pr = p_s + r * kChunk;
      float intra = 0.0f;
      for (int s = 0; s <= r; ++s) intra += pr[s] * delta[s * kChunkCols + lane];
      if (j < d) out[((t0 + r) * a.n_v + h) * d + j] = (inter[r * kChunkCols + lane] + intra) * a.out_scale;
    }
    const float decay_all = expf(G[n - 1]);
    for (int i = warp; i < d; i += kChunkWarps) {
      float add = 0.0f;
      for (int s = 0; s < n; ++s) add += to_end[s] * k_s[s * ld + i] * delta[s * kChunkCols + lane];
      s_s[i * kStateLd + lane] = decay_all * s_s[i * kStateLd + lane] + add;
    }
    __syncthreads();
  }
  for (int idx = tid; idx < kChunkCols * d; idx += blockDim.x) {
    const int c = idx / d, i = idx % d;
    if (j0 + c < d) S[(j0 + c) * d + i] = s_s[i * kStateLd + c];
  }
}

__global__ void mul_sigmoid_kernel(float* x, const float* gate, int64_t rows, int64_t n, int64_t gate_n) {
  pdl_begin();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * n) return;
  const int64_t r = idx / n, i = idx % n;
  const float g = gate[r * gate_n + (gate_n == 1 ? 0 : i)];
  x[idx] *= 1.0f / (1.0f + expf(-g));  // ggml_sigmoid rounded to float, then ggml_mul
}

}  // namespace

void launch_delta_net_conv(const float* u, int64_t rows, int64_t channels, const float* conv_w, int taps,
                           float* state, float* y, cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  const unsigned blocks = static_cast<unsigned>((channels + 127) / 128);
  if (rows <= kFusedConvRows) {
    launch_kernel(delta_net_conv_fused_kernel, blocks, 128, 0, stream, u, rows, channels, conv_w, taps, state,
                  y);
    check_launch("delta_net_conv kernel");
    return;
  }
  launch_kernel(delta_net_conv_kernel, dim3(blocks, static_cast<unsigned>(std::min<int64_t>(rows, 65535))),
                128, 0, stream, u, rows, channels, conv_w, taps, state, y);
  check_launch("delta_net_conv kernel");
  launch_kernel(delta_net_conv_state_kernel, blocks, 128, 0, stream, u, rows, channels, taps, state);
  check_launch("delta_net_conv state kernel");
}

void launch_gated_delta_net(const DeltaNetArgs& a, const float* qkv, const float* alpha, const float* beta,
                            int64_t rows, float* state, float* out, cudaStream_t stream) {
  if (rows <= 0) return;
  // Past the rows whose bits the backend promises batch-invariant, the chunked form, where the head's
  // shared-memory tiles fit (d <= 256 on sm_90); the token walk otherwise.
  if (rows > kMatvecMaxRows) {
    const size_t smem = chunked_smem_bytes(a.head_dim);
    int device = 0, smem_limit = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&smem_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "cudaDeviceGetAttribute (shared memory per block)");
    if (smem <= static_cast<size_t>(smem_limit)) {
      check_cuda(cudaFuncSetAttribute(gated_delta_net_chunked_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                 "cudaFuncSetAttribute (gated_delta_net chunked kernel)");
      const dim3 grid(static_cast<unsigned>(a.n_v),
                      static_cast<unsigned>((a.head_dim + kChunkCols - 1) / kChunkCols));
      launch_kernel(gated_delta_net_chunked_kernel, grid, kChunkWarps * kWarp, smem, stream, a, qkv, alpha,
                    beta, rows, state, out);
      check_launch("gated_delta_net chunked kernel");
      return;
    }
  }
  const dim3 grid(static_cast<unsigned>(a.n_v),
                  static_cast<unsigned>((a.head_dim + kColsPerBlock - 1) / kColsPerBlock));
  const int per_lane = (a.head_dim + kWarp - 1) / kWarp;
  const auto launch = [&](auto kernel) {
    launch_kernel(kernel, grid, kWarpsPerBlock * kWarp, 0, stream, a, qkv, alpha, beta, rows, state, out);
  };
  if (per_lane <= 1)
    launch(gated_delta_net_kernel<1>);
  else if (per_lane <= 2)
    launch(gated_delta_net_kernel<2>);
  else if (per_lane <= 4)
    launch(gated_delta_net_kernel<4>);
  else if (per_lane <= 8)
    launch(gated_delta_net_kernel<8>);
  else
    launch(gated_delta_net_kernel<16>);  // d <= 512, checked by the op
  check_launch("gated_delta_net kernel");
}

void launch_mul_sigmoid(float* x, const float* gate, int64_t rows, int64_t n, int64_t gate_n,
                        cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  launch_kernel(mul_sigmoid_kernel, static_cast<unsigned>((rows * n + 255) / 256), 256, 0, stream, x, gate,
                rows, n, gate_n);
  check_launch("mul_sigmoid kernel");
}

}  // namespace df::backend::cuda

// The f16 KV cache and llama.cpp's non-flash attention (the CPU backend's attention.cpp), in two shapes.
// Decode rows (a few per call): one block of 16 warps per (query row, head), so that a decode step's few
// blocks (one per head) still keep hundreds of keys in flight. Scores: a thread per key, the f16 × f16
// products (exact in float) summed in double; softmax over the visible keys with the sink in max and
// denominator (double sum); P rounded to f16; P·V: a warp per output dim at a time, its lanes over the keys
// (coalesced reads of the transposed V), each lane's double sum then the warp's tree.
// Prompt rows (more than a decode batch): the same three steps as three kernels, the two products over
// 64 × 64 tiles of (query rows × keys) and (query rows × dims) whose operands are staged once in shared
// memory for the whole tile instead of read again by every row's block (a 512-token prompt's attention took
// 850 us a layer in the per-row kernel). The tiles sum in double in index order with fused multiply-adds of
// operands that are f16 values (exact products): the scores are the decode kernel's bits, the softmax is its
// code, and P·V differs from the decode sum only in the order of exact double additions.
// Scores live in backend scratch (rows × n_head × n_ctx floats per launch; the host splits long prefills
// into chunks).
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {
namespace {

constexpr int kAttnWarps = 16;

__global__ void kv_store_kernel(uint16_t* k_cache, uint16_t* v_cache, int n_ctx, int64_t row, const float* k,
                                const float* v, int pos0, const int32_t* pos0_device) {
  pdl_begin();
  const int64_t r = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= row) return;
  const int64_t p = (pos0_device ? *pos0_device : pos0) + r;
  k_cache[p * row + i] = f32_to_f16(k[r * row + i]);
  v_cache[i * n_ctx + p] = f32_to_f16(v[r * row + i]);
}

__device__ float block_max(float v, float* red) {
  v = warp_max(v);
  if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = v;
  __syncthreads();
  float m = red[0];
  for (int w = 1; w < kAttnWarps; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  return m;
}
__device__ double block_sum(double v, double* red) {
  v = warp_sum(v);
  if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < kAttnWarps; ++w) s += red[w];
  __syncthreads();
  return s;
}

// The visible keys' scores sc[0..n_kv) (local_max: this thread's max over its keys and the sink) become the
// probabilities rounded to f16: e = exp(score - max), their double sum (plus the sink's), e / sum. A block of
// kAttnWarps warps, key j on thread j mod the block: the decode and prompt kernels share it, and its bits.
__device__ void normalize_scores(float* sc, int64_t n_kv, float local_max, const float* sink, float* red_f,
                                 double* red_d) {
  const float max = block_max(local_max, red_f);
  double local_sum = 0.0;
  for (int64_t j = threadIdx.x; j < n_kv; j += blockDim.x) {
    const float e = expf(sc[j] - max);
    sc[j] = e;
    local_sum += static_cast<double>(e);
  }
  double sum = block_sum(local_sum, red_d);
  if (sink) sum += static_cast<double>(expf(*sink - max));
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = threadIdx.x; j < n_kv; j += blockDim.x) sc[j] = round_f16(sc[j] * inv);
  __syncthreads();
}

__device__ __forceinline__ int64_t first_visible(int64_t at, int window) {
  return window > 0 ? max(int64_t{0}, at - window + 1) : 0;
}

__global__ void __launch_bounds__(kAttnWarps* kWarp)
    attention_kernel(const uint16_t* k_cache, const uint16_t* v_cache, const float* q, int pos0,
                     const int32_t* pos0_device, AttnArgs a, float* out, float* scores) {
  pdl_begin();
  extern __shared__ float s_q[];  // head_dim values of q rounded to f16
  __shared__ float red_f[kAttnWarps];
  __shared__ double red_d[kAttnWarps];
  const int h = blockIdx.x;
  const int64_t r = blockIdx.y;
  const int hd = a.head_dim, kh = h / (a.n_head / a.n_head_kv);
  const int64_t at = (pos0_device ? *pos0_device : pos0) + r;
  const int64_t first = first_visible(at, a.window);
  const int64_t n_kv = at - first + 1;
  const float* qr = q + (r * a.n_head + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) s_q[d] = round_f16(qr[d]);
  __syncthreads();
  float* sc = scores + (r * a.n_head + h) * static_cast<int64_t>(a.n_ctx);
  const int64_t k_row = static_cast<int64_t>(a.n_head_kv) * hd;

  // Scores: a thread per key, the head_dim products (exact in float) summed in double in index order.
  float local_max = a.sinks ? a.sinks[h] : -INFINITY;
  for (int64_t j = threadIdx.x; j < n_kv; j += blockDim.x) {
    const uint16_t* kr = k_cache + (first + j) * k_row + static_cast<int64_t>(kh) * hd;
    double s = 0.0;
    if (hd % 2 == 0) {  // rows 4-byte aligned: the values two at a time
      for (int d = 0; d < hd; d += 2) {
        const uint32_t pair = *reinterpret_cast<const uint32_t*>(kr + d);
        s += static_cast<double>(__fmul_rn(s_q[d], f16_to_f32(static_cast<uint16_t>(pair & 0xFFFFu))));
        s += static_cast<double>(__fmul_rn(s_q[d + 1], f16_to_f32(static_cast<uint16_t>(pair >> 16))));
      }
    } else {
      for (int d = 0; d < hd; ++d) s += static_cast<double>(__fmul_rn(s_q[d], f16_to_f32(kr[d])));
    }
    float v = static_cast<float>(s) * a.scale;
    if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
    sc[j] = v;
    local_max = fmaxf(local_max, v);
  }
  normalize_scores(sc, n_kv, local_max, a.sinks ? a.sinks + h : nullptr, red_f, red_d);

  // P·V: warp w sums dims w, w + kAttnWarps, ...: lane l the keys l, l + 32, ... of the dim's row of the
  // transposed V in double, then the warp's tree of the lanes' sums.
  float* o = out + (r * a.n_head + h) * hd;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  for (int d = static_cast<int>(threadIdx.x) / kWarp; d < hd; d += kAttnWarps) {
    const uint16_t* vr = v_cache + (static_cast<int64_t>(kh) * hd + d) * a.n_ctx + first;
    double s = 0.0;
    for (int64_t j = lane; j < n_kv; j += kWarp)
      s += static_cast<double>(__fmul_rn(sc[j], f16_to_f32(vr[j])));
    s = warp_sum(s);
    if (lane == 0) o[d] = static_cast<float>(s);
  }
}

// ---- Prompt rows: 64 × 64 tiles summed exactly in double.
constexpr int kTile = 64;          // query rows, and keys or dims, of a block's tile
constexpr int kTileInner = 32;     // inner values staged per round
constexpr int kTileThreads = 256;  // 16 × 16 threads, each 4 × 4 outputs: rows ty + 16 i, columns tx + 16 j
constexpr int kTileStride = kTile + 1;  // odd, so that a warp's column of staged values meets 16 bank pairs

// acc[i][j] = Σ_t a(ty + 16 i, t) · b(tx + 16 j, t) over t in [lo, hi), in increasing t, each term a fused
// multiply-add in double (a and b return doubles, 0 outside their operands). The staged values sit
// inner-major, so that each thread reads its four rows of a round in one broadcast or one 128-byte line.
template <class LoadA, class LoadB>
__device__ void exact_tile_product(double (&acc)[4][4], int64_t lo, int64_t hi, LoadA load_a, LoadB load_b) {
  __shared__ double sa[kTileInner][kTileStride], sb[kTileInner][kTileStride];
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  const int t_in = static_cast<int>(threadIdx.x) % kTileInner,
            row0 = static_cast<int>(threadIdx.x) / kTileInner;
  for (int64_t t0 = lo; t0 < hi; t0 += kTileInner) {
    const int64_t t = t0 + t_in;
    for (int row = row0; row < kTile; row += kTileThreads / kTileInner) {
      sa[t_in][row] = t < hi ? load_a(row, t) : 0.0;
      sb[t_in][row] = t < hi ? load_b(row, t) : 0.0;
    }
    __syncthreads();
#pragma unroll 8
    for (int u = 0; u < kTileInner; ++u) {
      double av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = sa[u][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = sb[u][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
}

struct PromptTile {
  int64_t p0;           // the launch's first position
  int64_t q0, n_rows;   // the tile's first query row and its rows (at most kTile)
  int64_t first, last;  // the keys any of its rows sees: first of its first row, the position of its last
};
__device__ PromptTile prompt_tile(int pos0, const int32_t* pos0_device, int64_t rows, int window) {
  PromptTile t;
  t.p0 = pos0_device ? *pos0_device : pos0;
  t.q0 = static_cast<int64_t>(blockIdx.y) * kTile;
  t.n_rows = min(int64_t{kTile}, rows - t.q0);
  t.first = first_visible(t.p0 + t.q0, window);
  t.last = t.p0 + t.q0 + t.n_rows - 1;
  return t;
}

// Scores of a tile of query rows × keys of one head (grid: key tiles × row tiles × heads), stored at each
// row's absolute key index for the keys the row sees; the decode kernel's value for each.
__global__ void __launch_bounds__(kTileThreads)
    attention_prompt_scores_kernel(const uint16_t* k_cache, const float* q, int64_t rows, int pos0,
                                   const int32_t* pos0_device, AttnArgs a, float* scores) {
  pdl_begin();
  const PromptTile tile = prompt_tile(pos0, pos0_device, rows, a.window);
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kTile;
  if (k0 > tile.last || k0 + kTile <= tile.first) return;  // no row of the tile sees these keys
  const int h = blockIdx.z, hd = a.head_dim, kh = h / (a.n_head / a.n_head_kv);
  const int64_t k_row = static_cast<int64_t>(a.n_head_kv) * hd;
  double acc[4][4] = {};
  exact_tile_product(
      acc, 0, hd,
      [&](int i, int64_t d) {
        return i < tile.n_rows ? static_cast<double>(round_f16(q[((tile.q0 + i) * a.n_head + h) * hd + d]))
                               : 0.0;
      },
      [&](int j, int64_t d) {
        const int64_t key = k0 + j;
        return key <= tile.last
                   ? static_cast<double>(f16_to_f32(k_cache[key * k_row + static_cast<int64_t>(kh) * hd + d]))
                   : 0.0;
      });
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  for (int i = 0; i < 4; ++i) {
    const int64_t r = tile.q0 + ty + 16 * i;
    if (r >= rows) continue;
    const int64_t at = tile.p0 + r, first = first_visible(at, a.window);
    float* sc = scores + (r * a.n_head + h) * static_cast<int64_t>(a.n_ctx);
    for (int j = 0; j < 4; ++j) {
      const int64_t key = k0 + tx + 16 * j;
      if (key < first || key > at) continue;
      float v = static_cast<float>(acc[i][j]) * a.scale;
      if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
      sc[key] = v;
    }
  }
}

// Each (row, head)'s visible scores become probabilities, as in the decode kernel (grid: heads × rows).
__global__ void __launch_bounds__(kAttnWarps* kWarp)
    attention_prompt_softmax_kernel(int pos0, const int32_t* pos0_device, AttnArgs a, float* scores) {
  pdl_begin();
  __shared__ float red_f[kAttnWarps];
  __shared__ double red_d[kAttnWarps];
  const int h = blockIdx.x;
  const int64_t r = blockIdx.y;
  const int64_t at = (pos0_device ? *pos0_device : pos0) + r, first = first_visible(at, a.window);
  const int64_t n_kv = at - first + 1;
  float* sc = scores + (r * a.n_head + h) * static_cast<int64_t>(a.n_ctx) + first;
  float local_max = a.sinks ? a.sinks[h] : -INFINITY;
  for (int64_t j = threadIdx.x; j < n_kv; j += blockDim.x) local_max = fmaxf(local_max, sc[j]);
  normalize_scores(sc, n_kv, local_max, a.sinks ? a.sinks + h : nullptr, red_f, red_d);
}

// P·V of a tile of query rows × output dims of one head (grid: dim tiles × row tiles × heads), over the keys
// any row of the tile sees; a key a row does not see has probability 0 there.
__global__ void __launch_bounds__(kTileThreads)
    attention_prompt_pv_kernel(const uint16_t* v_cache, int64_t rows, int pos0, const int32_t* pos0_device,
                               AttnArgs a, const float* scores, float* out) {
  pdl_begin();
  const PromptTile tile = prompt_tile(pos0, pos0_device, rows, a.window);
  const int h = blockIdx.z, hd = a.head_dim, kh = h / (a.n_head / a.n_head_kv);
  const int64_t d0 = static_cast<int64_t>(blockIdx.x) * kTile;
  double acc[4][4] = {};
  exact_tile_product(
      acc, tile.first, tile.last + 1,
      [&](int i, int64_t key) {
        if (i >= tile.n_rows) return 0.0;
        const int64_t r = tile.q0 + i, at = tile.p0 + r;
        if (key > at || key < first_visible(at, a.window)) return 0.0;
        return static_cast<double>(scores[(r * a.n_head + h) * static_cast<int64_t>(a.n_ctx) + key]);
      },
      [&](int j, int64_t key) {
        const int64_t d = d0 + j;
        return d < hd ? static_cast<double>(
                            f16_to_f32(v_cache[(static_cast<int64_t>(kh) * hd + d) * a.n_ctx + key]))
                      : 0.0;
      });
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  for (int i = 0; i < 4; ++i) {
    const int64_t r = tile.q0 + ty + 16 * i;
    if (r >= rows) continue;
    for (int j = 0; j < 4; ++j) {
      const int64_t d = d0 + tx + 16 * j;
      if (d < hd) out[(r * a.n_head + h) * hd + d] = static_cast<float>(acc[i][j]);
    }
  }
}

// s_q: head_dim floats.
size_t attention_smem_bytes(int hd) { return static_cast<size_t>(hd) * sizeof(float); }

}  // namespace

void launch_kv_store(uint16_t* k_cache, uint16_t* v_cache, int n_ctx, int64_t row, const float* k,
                     const float* v, int64_t rows, int pos0, const int32_t* pos0_device,
                     cudaStream_t stream) {
  if (rows <= 0 || row <= 0) return;
  launch_kernel(kv_store_kernel, dim3(static_cast<unsigned>((row + 255) / 256), static_cast<unsigned>(rows)),
                256, 0, stream, k_cache, v_cache, n_ctx, row, k, v, pos0, pos0_device);
  check_launch("kv_store kernel");
}

void launch_attention(const uint16_t* k_cache, const uint16_t* v_cache, const float* q, int64_t rows,
                      int pos0, const int32_t* pos0_device, const AttnArgs& a, float* out, float* scores,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  if (rows <= kMatvecMaxRows) {
    launch_kernel(attention_kernel, dim3(static_cast<unsigned>(a.n_head), static_cast<unsigned>(rows)),
                  kAttnWarps * kWarp, attention_smem_bytes(a.head_dim), stream, k_cache, v_cache, q, pos0,
                  pos0_device, a, out, scores);
    check_launch("attention kernel");
    return;
  }
  const auto tiles = [](int64_t n) { return static_cast<unsigned>((n + kTile - 1) / kTile); };
  // A recorded step's position changes between replays: its key tiles then cover the whole context (the
  // tiles no row sees return at once).
  const int64_t keys = pos0_device ? a.n_ctx : pos0 + rows;
  launch_kernel(attention_prompt_scores_kernel,
                dim3(tiles(keys), tiles(rows), static_cast<unsigned>(a.n_head)), kTileThreads, 0, stream,
                k_cache, q, rows, pos0, pos0_device, a, scores);
  check_launch("attention scores kernel");
  launch_kernel(attention_prompt_softmax_kernel,
                dim3(static_cast<unsigned>(a.n_head), static_cast<unsigned>(rows)), kAttnWarps * kWarp, 0,
                stream, pos0, pos0_device, a, scores);
  check_launch("attention softmax kernel");
  launch_kernel(attention_prompt_pv_kernel,
                dim3(tiles(a.head_dim), tiles(rows), static_cast<unsigned>(a.n_head)), kTileThreads, 0,
                stream, v_cache, rows, pos0, pos0_device, a, static_cast<const float*>(scores), out);
  check_launch("attention P·V kernel");
}

}  // namespace df::backend::cuda

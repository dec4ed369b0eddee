// The f16 KV cache and llama.cpp's non-flash attention (the CPU backend's attention.cpp), in two shapes.
// Decode rows (a few per call): one block of 16 warps per (query row, head), so that a decode step's few
// blocks (one per head) still keep hundreds of keys in flight. Scores: a thread per key, the f16 × f16
// products (exact in float) summed in double; softmax over the visible keys with the sink in max and
// denominator (double sum); P rounded to f16; P·V: a warp per output dim at a time, its lanes over the keys
// (coalesced reads of the transposed V), each lane's double sum then the warp's tree.
// Prompt rows (more than a decode batch): the same three steps as three kernels, the two products over
// tiles of (query rows × 64 keys) and (query rows × 64 dims) whose operands are staged once in shared memory
// for the whole tile instead of read again by every row's block (a 512-token prompt's attention took 850 us
// a layer in the per-row kernel, 230 tiled). The tiles sum in double in index order with fused multiply-adds
// of operands that are f16 values (exact products): the scores are the decode kernel's bits, the softmax is
// its code, and P·V differs from the decode sum only in the order of exact double additions. Scores live in
// backend scratch (rows × n_head × n_ctx floats per launch; the host splits long prefills into chunks).
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q8_block.cuh"

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

// The visible keys' scores sc[0..n_kv) (local_max: this thread's max over its keys and the sink) become the
// probabilities rounded to f16: e = exp(score - max), their double sum (plus the sink's), e / sum. The sum's
// order is that of a block of kAttnWarps warps with key j on thread j mod the block (its own keys in order,
// the warp's tree, the warps' sums in index order), whether kThreads = kAttnWarps · 32 real threads run it
// (the decode kernel) or fewer, each standing for kSpan of those (virtual thread v on real thread v mod
// kThreads): so the decode and prompt kernels give the same bits. red_d: kAttnWarps doubles, red_f:
// kThreads / 32 floats, both of this group of threads only.
constexpr int kScoreThreads = kAttnWarps * kWarp;
template <int kThreads>
__device__ void normalize_scores(float* sc, int64_t n_kv, float local_max, const float* sink, float* red_f,
                                 double* red_d) {
  static_assert(kScoreThreads % kThreads == 0 && kThreads % kWarp == 0);
  constexpr int kSpan = kScoreThreads / kThreads, kGroupWarps = kThreads / kWarp;
  const int tid = static_cast<int>(threadIdx.x) % kThreads, lane = tid % kWarp;
  const auto sync = [] {
    if constexpr (kThreads == kWarp)
      __syncwarp();
    else
      __syncthreads();
  };
  float max = warp_max(local_max);
  if constexpr (kGroupWarps > 1) {
    if (lane == 0) red_f[tid / kWarp] = max;
    sync();
    max = red_f[0];
    for (int w = 1; w < kGroupWarps; ++w) max = fmaxf(max, red_f[w]);
  }
  double part[kSpan];
#pragma unroll
  for (int i = 0; i < kSpan; ++i) {
    part[i] = 0.0;
    for (int64_t j = tid + static_cast<int64_t>(i) * kThreads; j < n_kv; j += kScoreThreads) {
      const float e = expf(sc[j] - max);
      sc[j] = e;
      part[i] += static_cast<double>(e);
    }
  }
#pragma unroll
  for (int i = 0; i < kSpan; ++i) {
    const double v = warp_sum(part[i]);
    if (lane == 0) red_d[i * kGroupWarps + tid / kWarp] = v;
  }
  sync();
  double sum = 0.0;
  for (int w = 0; w < kAttnWarps; ++w) sum += red_d[w];
  if (sink) sum += static_cast<double>(expf(*sink - max));
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = tid; j < n_kv; j += kThreads) sc[j] = round_f16(sc[j] * inv);
  sync();
}

__device__ __forceinline__ int64_t first_visible(int64_t at, int window) {
  return window > 0 ? max(int64_t{0}, at - window + 1) : 0;
}

__global__ void __launch_bounds__(kAttnWarps* kWarp)
    attention_kernel(const uint16_t* k_cache, const uint16_t* v_cache, const float* q, int pos0,
                     const int32_t* pos0_device, AttnArgs a, float* out, float* scores, uint8_t* q8) {
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
  normalize_scores<kScoreThreads>(sc, n_kv, local_max, a.sinks ? a.sinks + h : nullptr, red_f, red_d);

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
    if (q8 && lane == 0) s_q[d] = static_cast<float>(s);  // q's values are no longer read
  }
  if (!q8) return;
  // The head's values as Q8_0 groups of the row (head_dim a multiple of 32): warp g quantizes the head's
  // group g (warp_quantize_q8_0_group).
  __syncthreads();
  const int64_t n = static_cast<int64_t>(a.n_head) * hd;
  uint8_t* row = q8 + r * act_row_stride(GgmlType::Q8_0, n);
  for (int g = static_cast<int>(threadIdx.x) / kWarp; g < hd / 32; g += kAttnWarps)
    warp_quantize_q8_0_group(s_q[g * 32 + lane], row, n, static_cast<int64_t>(h) * hd / 32 + g);
}

// ---- Prompt rows: tiles summed exactly in double.
// A tile is R query rows × kTile keys or dims, on R / 4 × 16 threads, each 4 × 4 outputs: rows ty + R/4 · i,
// columns tx + 16 j. The scores take R = 64; P·V, whose grid has no key dimension, R = 32 for more blocks.
constexpr int kTile = 64;
constexpr int kTileInner = 32;  // inner values staged per round
constexpr int kScoresRows = 64, kPvRows = 32;
__host__ __device__ constexpr int tile_threads(int rows) { return rows / 4 * 16; }

// acc[i][j] = Σ_t a(ty + R/4 · i, t) · b(tx + 16 j, t) over t in [lo, hi), in increasing t, each term a fused
// multiply-add in double (a and b return doubles, 0 outside their operands). The staged values sit
// inner-major, so that each thread reads its four rows of a round in one broadcast or one 128-byte line.
// The rows' strides are odd, so that a warp's column of staged values meets 16 bank pairs.
template <int R, class LoadA, class LoadB>
__device__ void exact_tile_product(double (&acc)[4][4], int64_t lo, int64_t hi, LoadA load_a, LoadB load_b) {
  constexpr int kThreads = tile_threads(R), kRowStep = kThreads / kTileInner;
  __shared__ double sa[kTileInner][R + 1], sb[kTileInner][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  const int t_in = static_cast<int>(threadIdx.x) % kTileInner,
            row0 = static_cast<int>(threadIdx.x) / kTileInner;
  for (int64_t t0 = lo; t0 < hi; t0 += kTileInner) {
    const int64_t t = t0 + t_in;
    for (int row = row0; row < R; row += kRowStep) sa[t_in][row] = t < hi ? load_a(row, t) : 0.0;
    for (int row = row0; row < kTile; row += kRowStep) sb[t_in][row] = t < hi ? load_b(row, t) : 0.0;
    __syncthreads();
#pragma unroll 8
    for (int u = 0; u < kTileInner; ++u) {
      double av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = sa[u][ty + R / 4 * i];
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
  int64_t q0, n_rows;   // the tile's first query row and its rows (at most R)
  int64_t first, last;  // the keys any of its rows sees: first of its first row, the position of its last
};
template <int R>
__device__ PromptTile prompt_tile(int pos0, const int32_t* pos0_device, int64_t rows, int window) {
  PromptTile t;
  t.p0 = pos0_device ? *pos0_device : pos0;
  t.q0 = static_cast<int64_t>(blockIdx.y) * R;
  t.n_rows = min(int64_t{R}, rows - t.q0);
  t.first = first_visible(t.p0 + t.q0, window);
  t.last = t.p0 + t.q0 + t.n_rows - 1;
  return t;
}

// Scores of a tile of query rows × keys of one head (grid: key tiles × row tiles × heads), stored at each
// row's absolute key index for the keys the row sees; the decode kernel's value for each.
__global__ void __launch_bounds__(tile_threads(kScoresRows))
    attention_prompt_scores_kernel(const uint16_t* k_cache, const float* q, int64_t rows, int pos0,
                                   const int32_t* pos0_device, AttnArgs a, float* scores) {
  pdl_begin();
  const PromptTile tile = prompt_tile<kScoresRows>(pos0, pos0_device, rows, a.window);
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kTile;
  if (k0 > tile.last || k0 + kTile <= tile.first) return;  // no row of the tile sees these keys
  const int h = blockIdx.z, hd = a.head_dim, kh = h / (a.n_head / a.n_head_kv);
  const int64_t k_row = static_cast<int64_t>(a.n_head_kv) * hd;
  double acc[4][4] = {};
  exact_tile_product<kScoresRows>(
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
    const int64_t r = tile.q0 + ty + kScoresRows / 4 * i;
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

// Each (row, head)'s visible scores become probabilities, as in the decode kernel: a warp per (row, head)
// standing for the decode kernel's block (grid: (heads × rows) / kSoftmaxWarps).
constexpr int kSoftmaxWarps = 4;
__global__ void __launch_bounds__(kSoftmaxWarps* kWarp)
    attention_prompt_softmax_kernel(int64_t rows, int pos0, const int32_t* pos0_device, AttnArgs a,
                                    float* scores) {
  pdl_begin();
  __shared__ double red_d[kSoftmaxWarps][kAttnWarps];
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kSoftmaxWarps + warp;
  if (unit >= rows * a.n_head) return;
  const int64_t r = unit / a.n_head;
  const int h = static_cast<int>(unit % a.n_head);
  const int64_t at = (pos0_device ? *pos0_device : pos0) + r, first = first_visible(at, a.window);
  const int64_t n_kv = at - first + 1;
  float* sc = scores + (r * a.n_head + h) * static_cast<int64_t>(a.n_ctx) + first;
  float local_max = a.sinks ? a.sinks[h] : -INFINITY;
  for (int64_t j = threadIdx.x % kWarp; j < n_kv; j += kWarp) local_max = fmaxf(local_max, sc[j]);
  normalize_scores<kWarp>(sc, n_kv, local_max, a.sinks ? a.sinks + h : nullptr, nullptr, red_d[warp]);
}

// P·V of a tile of query rows × output dims of one head (grid: dim tiles × row tiles × heads), over the keys
// any row of the tile sees; a key a row does not see has probability 0 there.
__global__ void __launch_bounds__(tile_threads(kPvRows))
    attention_prompt_pv_kernel(const uint16_t* v_cache, int64_t rows, int pos0, const int32_t* pos0_device,
                               AttnArgs a, const float* scores, float* out) {
  pdl_begin();
  const PromptTile tile = prompt_tile<kPvRows>(pos0, pos0_device, rows, a.window);
  const int h = blockIdx.z, hd = a.head_dim, kh = h / (a.n_head / a.n_head_kv);
  const int64_t d0 = static_cast<int64_t>(blockIdx.x) * kTile;
  double acc[4][4] = {};
  exact_tile_product<kPvRows>(
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
    const int64_t r = tile.q0 + ty + kPvRows / 4 * i;
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

bool attention_quantizes(int64_t rows, int head_dim) {
  return rows >= 1 && rows <= kMatvecMaxRows && head_dim % 32 == 0;
}

void launch_attention(const uint16_t* k_cache, const uint16_t* v_cache, const float* q, int64_t rows,
                      int pos0, const int32_t* pos0_device, const AttnArgs& a, float* out, float* scores,
                      uint8_t* q8, cudaStream_t stream) {
  if (rows <= 0) return;
  if (q8 && !attention_quantizes(rows, a.head_dim)) {
    check_cuda(cudaErrorInvalidValue, "attention kernel (quantized rows where attention_quantizes refuses)");
  }
  if (rows <= kMatvecMaxRows) {
    launch_kernel(attention_kernel, dim3(static_cast<unsigned>(a.n_head), static_cast<unsigned>(rows)),
                  kAttnWarps * kWarp, attention_smem_bytes(a.head_dim), stream, k_cache, v_cache, q, pos0,
                  pos0_device, a, out, scores, q8);
    check_launch("attention kernel");
    return;
  }
  const auto tiles = [](int64_t n, int size) { return static_cast<unsigned>((n + size - 1) / size); };
  // A recorded step's position changes between replays: its key tiles then cover the whole context (the
  // tiles no row sees return at once).
  const int64_t keys = pos0_device ? a.n_ctx : pos0 + rows;
  launch_kernel(attention_prompt_scores_kernel,
                dim3(tiles(keys, kTile), tiles(rows, kScoresRows), static_cast<unsigned>(a.n_head)),
                tile_threads(kScoresRows), 0, stream, k_cache, q, rows, pos0, pos0_device, a, scores);
  check_launch("attention scores kernel");
  const int64_t units = rows * a.n_head;
  launch_kernel(attention_prompt_softmax_kernel,
                static_cast<unsigned>((units + kSoftmaxWarps - 1) / kSoftmaxWarps), kSoftmaxWarps * kWarp, 0,
                stream, rows, pos0, pos0_device, a, scores);
  check_launch("attention softmax kernel");
  launch_kernel(attention_prompt_pv_kernel,
                dim3(tiles(a.head_dim, kTile), tiles(rows, kPvRows), static_cast<unsigned>(a.n_head)),
                tile_threads(kPvRows), 0, stream, v_cache, rows, pos0, pos0_device, a,
                static_cast<const float*>(scores), out);
  check_launch("attention P·V kernel");
}

}  // namespace df::backend::cuda

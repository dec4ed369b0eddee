#pragma once
// Int8 tensor-core tiles for the matrix products of many activation rows (prefill): Q4_0 and Q8_0 weights
// against Q8_0 activations, by mma.sync m16n8k32 (s8 · s8 -> s32). A warp computes 16 weight rows × NT
// activation rows. Each k step is exactly one 32-value block of both operands, so the tensor core gives every
// (weight row, activation row) pair that block's integer dot product, exact; the block's float is then made
// as the scalar reference makes it (TQ4_0 / TQ8_0 in matvec.cuh) and added to the pair's sum. So a block
// contributes the same float as in the dp4a kernels and on the CPU; only the order of adding blocks differs.
//
// Fragment layouts (PTX ISA, mma.m16n8k32 .s8): lane = 4 g + t. A (16 × 32, row-major): a0 = row g, k
// 4t..4t+3; a1 = row g + 8, same k; a2 = row g, k 16 + 4t..; a3 = row g + 8, k 16 + 4t... B (32 × 8,
// column-major): b0 = column g, k 4t..4t+3; b1 = column g, k 16 + 4t... C: c0, c1 = row g, columns 2t, 2t +
// 1; c2, c3 = row g + 8, the same columns.
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {

// Two 16-bit loads: a GGUF block's quants are only 2-byte aligned.
__device__ __forceinline__ uint32_t ld_u16x2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
}

__device__ __forceinline__ void mma_s8_16x8x32(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
}

struct MmaQ4_0 {
  static constexpr int kBlockBytes = 18;
  // This lane's A words of one block of a row (k 4t..4t+3 and 16 + 4t..) and the row's scale.
  __device__ static void load(const uint8_t* blk, int t, uint32_t& lo, uint32_t& hi, float& d) {
    const uint32_t q = ld_u16x2(blk + 2 + 4 * t);
    lo = __vsub4(q & 0x0F0F0F0Fu, 0x08080808u);
    hi = __vsub4((q >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    d = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
  }
  __device__ static float block_float(int sumi, float dw, float da) {
    return static_cast<float>(sumi) * dw * da;  // (sumi * dx) * dy, as dot_q4_0_q8_0
  }
};

struct MmaQ8_0 {
  static constexpr int kBlockBytes = 34;
  __device__ static void load(const uint8_t* blk, int t, uint32_t& lo, uint32_t& hi, float& d) {
    lo = ld_u16x2(blk + 2 + 4 * t);
    hi = ld_u16x2(blk + 2 + 16 + 4 * t);
    d = f16_to_f32(*reinterpret_cast<const uint16_t*>(blk));
  }
  __device__ static float block_float(int sumi, float dw, float da) {
    return static_cast<float>(sumi) * (dw * da);  // as dot_q8_0_q8_0
  }
};

// The rows of mma tiles a block of kMmaWarps computes: 16 per warp.
constexpr int kMmaWarps = 4;
constexpr int kMmaRowsPerBlock = 16 * kMmaWarps;
// Activation rows per tile (the column tile of the mma kernels' grid, and of an FFN work item).
constexpr int kMmaCols = 32;

// Calls f(row, column, j, i) for each of this lane's accumulator values acc[.][j][i] of a warp's tile whose
// first weight row is o0 (the C fragment layout above: row o0 + g or o0 + g + 8, column 8 j + 2 t or + 1).
template <class F>
__device__ __forceinline__ void for_each_fragment(int64_t o0, F&& f) {
  const int lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < kMmaCols / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) f(o0 + g + (i >= 2 ? 8 : 0), j * 8 + 2 * t + (i & 1), j, i);
}

// The operands of kMmaChunk 32-value blocks at a time, staged in shared memory by the whole block with
// 16-byte loads: the 4 warps' 64 weight rows (GGUF bytes as they are: a row's chunk is kMmaChunk blocks in
// a row, 144 bytes for Q4_0, 272 for Q8_0, so the 8 rows a fragment load meets fall on distinct banks) and
// the kMmaCols activation rows every warp shares (quants with 4 words of padding a row, for the same reason;
// scales by block then column). Read straight from global memory, the 2-byte weight loads and each warp's
// own copy of the activation loads kept the L1 95 % busy (ncu) with a fraction of each sector used.
constexpr int kMmaChunk = 8;
constexpr int kActChunkWords =
    kMmaChunk * 8 + 4;  // a staged activation row: kMmaChunk blocks of 8 words + pad

// Copies `bytes` (even) from src to dst (both 2-byte aligned; 16-byte aligned when vec), thread i of n
// taking units i, i + n, ...
__device__ __forceinline__ void stage_bytes(uint8_t* dst, const uint8_t* src, int bytes, bool vec, int i,
                                            int n) {
  if (vec) {
    for (int u = i; u < bytes / 16; u += n)
      reinterpret_cast<uint4*>(dst)[u] = reinterpret_cast<const uint4*>(src)[u];
  } else {
    for (int u = i; u < bytes / 2; u += n)
      reinterpret_cast<uint16_t*>(dst)[u] = reinterpret_cast<const uint16_t*>(src)[u];
  }
}

// acc[m][j][i] (C layout above, n-tile j) = Σ_blocks of rows o0 .. o0 + 15 of weight m (m < NW: gate and up
// share their activations, so one pass loads them once for both) against activation rows 0 .. NT - 1 of `act`
// (Q8_0, the backend's aligned layout: n_in quants then n_in / 32 float scales, rows act_stride apart), the
// blocks added in order. Rows past n_rows and activation rows past n_cols are read clamped (their results
// are garbage, not stored). Every thread of the block (kMmaWarps warps, warp w at rows o0 = first + 16 w)
// must call it: the operands are staged for the block.
template <class W, int NT, int NW>
__device__ __forceinline__ void mma_rows(const uint8_t* const (&w)[NW], const size_t (&row_bytes)[NW],
                                         int64_t n_rows, int64_t o0, int64_t n_in, const uint8_t* act,
                                         size_t act_stride, int n_cols, float (&acc)[NW][NT / 8][4]) {
  static_assert(NT == kMmaCols, "a block stages kMmaCols activation rows");
  constexpr int kChunkBytes = kMmaChunk * W::kBlockBytes;
  constexpr int kThreads = kMmaWarps * kWarp;
  __shared__ __align__(16) uint8_t s_w[NW][kMmaRowsPerBlock][kChunkBytes];
  __shared__ __align__(16) uint32_t s_q[NT][kActChunkWords];
  __shared__ float s_d[kMmaChunk][NT];
  const int lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4, tid = static_cast<int>(threadIdx.x);
  const int warp_row = (tid / kWarp) * 16;
  const int64_t first = o0 - warp_row;
#pragma unroll
  for (int m = 0; m < NW; ++m)
#pragma unroll
    for (int j = 0; j < NT / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[m][j][i] = 0.0f;
  bool w_vec = true;
#pragma unroll
  for (int m = 0; m < NW; ++m)
    w_vec = w_vec && reinterpret_cast<uintptr_t>(w[m]) % 16 == 0 && row_bytes[m] % 16 == 0;
  const int64_t nb = n_in / 32;
  for (int64_t b0 = 0; b0 < nb; b0 += kMmaChunk) {
    const int kc = static_cast<int>(min(int64_t{kMmaChunk}, nb - b0));
    // Stage: each weight row's kc blocks, then each activation row's kc blocks of quants and their scales.
#pragma unroll
    for (int m = 0; m < NW; ++m)
      for (int r = tid / 8; r < kMmaRowsPerBlock; r += kThreads / 8) {
        const uint8_t* src = w[m] + static_cast<size_t>(min(first + r, n_rows - 1)) * row_bytes[m] +
                             static_cast<size_t>(b0) * W::kBlockBytes;
        stage_bytes(s_w[m][r], src, kc * W::kBlockBytes, w_vec && kc == kMmaChunk, tid % 8, 8);
      }
    for (int u = tid; u < NT * kc * 2; u += kThreads) {
      const int c = u / (kc * 2), part = u % (kc * 2);
      const uint8_t* row = act + static_cast<size_t>(min(c, n_cols - 1)) * act_stride;
      reinterpret_cast<uint4*>(s_q[c])[part] = reinterpret_cast<const uint4*>(row + b0 * 32)[part];
    }
    for (int u = tid; u < NT * kc; u += kThreads) {
      const int c = u / kc, kb = u % kc;
      const uint8_t* row = act + static_cast<size_t>(min(c, n_cols - 1)) * act_stride;
      s_d[kb][c] = reinterpret_cast<const float*>(row + n_in)[b0 + kb];
    }
    __syncthreads();
    for (int kb = 0; kb < kc; ++kb) {
      uint32_t a[NW][4];
      float d_g[NW], d_g8[NW];
#pragma unroll
      for (int m = 0; m < NW; ++m) {
        W::load(s_w[m][warp_row + g] + kb * W::kBlockBytes, t, a[m][0], a[m][2], d_g[m]);
        W::load(s_w[m][warp_row + g + 8] + kb * W::kBlockBytes, t, a[m][1], a[m][3], d_g8[m]);
      }
#pragma unroll
      for (int j = 0; j < NT / 8; ++j) {
        const uint32_t* q = s_q[j * 8 + g] + kb * 8;
        const uint32_t bf[2] = {q[t], q[4 + t]};
        const float da0 = s_d[kb][j * 8 + 2 * t], da1 = s_d[kb][j * 8 + 2 * t + 1];
#pragma unroll
        for (int m = 0; m < NW; ++m) {
          int c[4];
          mma_s8_16x8x32(c, a[m], bf);
          acc[m][j][0] += W::block_float(c[0], d_g[m], da0);
          acc[m][j][1] += W::block_float(c[1], d_g[m], da1);
          acc[m][j][2] += W::block_float(c[2], d_g8[m], da0);
          acc[m][j][3] += W::block_float(c[3], d_g8[m], da1);
        }
      }
    }
    __syncthreads();
  }
}

// Calls f.template operator()<W>() for a weight type the mma tiles take; false for any other.
template <class F>
bool with_mma_weight(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q4_0:
      f.template operator()<MmaQ4_0>();
      return true;
    case GgmlType::Q8_0:
      f.template operator()<MmaQ8_0>();
      return true;
    default:
      return false;
  }
}

}  // namespace df::backend::cuda

#pragma once
// Internal to the SIMD levels. The x86_*.h headers hold one implementation written with 256-bit
// intrinsics; vec_dot_avx2.cpp and vec_dot_avx512.cpp each include them inside a namespace of their own
// (DF_X86_LEVEL) and compile them for their instruction set, the AVX-512 one turning a few operations into
// their VNNI forms. Nothing else may include them: the code they produce runs only behind the level check.
//
// Rules that keep a machine without the level safe and the results exact:
// - no std:: templates or inline functions of other headers are instantiated here (a copy compiled for
//   AVX-512 could be the one the linker keeps for the whole program); only intrinsics and the code below;
// - floating-point contraction is off (GCC contracts a * b + c into an FMA by default in C++, which would
//   round differently from the references of quant/).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels/level_table.h"
#include "quant/quant.h"

#ifndef DF_X86_LEVEL
#error "x86_common.h is included only by the per-level kernel files, which define DF_X86_LEVEL"
#endif

#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define DF_X86_VNNI 1
#else
#define DF_X86_VNNI 0
#endif

#define DF_X86_INLINE inline __attribute__((always_inline))

namespace df::kernels::detail::DF_X86_LEVEL {

using quant::BlockMXFP4;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::BlockQ8_K;

DF_X86_INLINE __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
DF_X86_INLINE __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
DF_X86_INLINE void store256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

DF_X86_INLINE uint16_t read_u16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
DF_X86_INLINE uint32_t read_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Asks for the cache lines of [base + offset, base + offset + bytes) ahead of use, into L2. The row-tiled
// kernels prefetch the rows two tiles ahead at the offset they are working on: on Zen 4 (this VM at least)
// the hardware prefetchers do not follow four interleaved row streams, and the matrix-vector products of
// matrices beyond L3 ran at 3.4 GB/s without hints, 7.7 GB/s with L1 hints one tile ahead and 19.7 GB/s
// with L2 hints two tiles ahead (Q6_K, 2048 x 65536, docs/PERF.md). Past the last tile that address lies
// outside the matrix, which a prefetch never faults on; it is formed as an integer, not as an out-of-range
// pointer.
DF_X86_INLINE void prefetch_span(const uint8_t* base, size_t offset, size_t bytes) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(base) + offset;
  for (size_t off = 0; off < bytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(start + off), _MM_HINT_T1);
}

// Rows ahead of the tile being computed whose bytes prefetch_span asks for.
inline constexpr int kPrefetchTiles = 2;

// Exact for every half, subnormals included (F16C).
DF_X86_INLINE float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

// The f16 fields at p, p + stride, ... of `count` (<= 8) blocks as floats; lanes past count are 0.
DF_X86_INLINE __m256 load_halves(const void* p, size_t stride, int count) {
  const auto* b = static_cast<const uint8_t*>(p);
  auto at = [&](int k) -> short {
    return k < count ? static_cast<short>(read_u16(b + k * stride)) : short{0};
  };
  return _mm256_cvtph_ps(_mm_setr_epi16(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7)));
}

// Sum of u8 x s8 products over each group of four adjacent bytes, in 8 int32 lanes. Exact when every
// unsigned operand is <= 127: the AVX2 form adds byte pairs in int16 with saturation before widening.
DF_X86_INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
#if DF_X86_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// acc + the sums of adjacent int16 products (exact).
DF_X86_INLINE __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
#if DF_X86_VNNI
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

DF_X86_INLINE int32_t sum_lanes(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Lane k of the result is the sum of the 8 lanes of v(k), k < 8.
template <class V>
DF_X86_INLINE __m256i sum_lanes_8x8(V&& v) {
  const __m256i t0 = _mm256_hadd_epi32(v(0), v(1));
  const __m256i t1 = _mm256_hadd_epi32(v(2), v(3));
  const __m256i t2 = _mm256_hadd_epi32(v(4), v(5));
  const __m256i t3 = _mm256_hadd_epi32(v(6), v(7));
  const __m256i u0 = _mm256_hadd_epi32(t0, t1);  // v0..v3: lanes 0-3 partials | lanes 4-7 partials
  const __m256i u1 = _mm256_hadd_epi32(t2, t3);  // v4..v7 likewise
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// Adds the first `count` lanes of v to sum one after the other, as the references' block loops do.
DF_X86_INLINE void add_in_order(float& sum, __m256 v, int count) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  for (int k = 0; k < count; ++k) sum += t[k];
}

// Low and high nibbles of 16 bytes as 32 bytes: elements 0..15 then 16..31 (Q4_0, Q4_1, MXFP4).
DF_X86_INLINE __m256i nibbles_32(const uint8_t* qs) {
  const __m128i q = load128(qs);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

// Tiles: Kernel::tile<R, C>(w, w_stride, act, act_stride, n, out, out_stride) computes the R x C dot
// products of rows r < R against activation rows c < C into out[c * out_stride + r]. The work of a weight
// block (unpacking) is shared by the C activation rows, that of an activation block by the R weight rows;
// every output goes through the same operations whatever the tile, so results never depend on it.
inline constexpr int kRowTile = 4, kColTile = 4;

template <class Kernel>
float dot(const void* w_row, const void* act_row, int64_t n) {
  float out;
  Kernel::template tile<1, 1>(static_cast<const uint8_t*>(w_row), 0, static_cast<const uint8_t*>(act_row), 0,
                              n, &out, 0);
  return out;
}

template <class Kernel, int R>
void row_tile(const uint8_t* w, size_t w_stride, const uint8_t* act, size_t act_stride, int64_t cols,
              int64_t n, float* out, size_t out_stride) {
  int64_t c = 0;
  for (; c + kColTile <= cols; c += kColTile) {
    Kernel::template tile<R, kColTile>(w, w_stride, act + static_cast<size_t>(c) * act_stride, act_stride, n,
                                       out + static_cast<size_t>(c) * out_stride, out_stride);
  }
  for (; c < cols; ++c) {
    Kernel::template tile<R, 1>(w, w_stride, act + static_cast<size_t>(c) * act_stride, act_stride, n,
                                out + static_cast<size_t>(c) * out_stride, out_stride);
  }
}

template <class Kernel>
void gemm(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride, int64_t cols,
          int64_t n, float* out, size_t out_stride) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  // Row tiles outside, activation rows inside: a tile of W stays in L1 while every activation row passes.
  for (int64_t r0 = 0; r0 < rows; r0 += kRowTile) {
    const int64_t left = rows - r0;
    const uint8_t* wt = wb + static_cast<size_t>(r0) * w_stride;
    float* ot = out + r0;
    if (left >= 4) {
      row_tile<Kernel, 4>(wt, w_stride, ab, act_stride, cols, n, ot, out_stride);
    } else if (left == 3) {
      row_tile<Kernel, 3>(wt, w_stride, ab, act_stride, cols, n, ot, out_stride);
    } else if (left == 2) {
      row_tile<Kernel, 2>(wt, w_stride, ab, act_stride, cols, n, ot, out_stride);
    } else {
      row_tile<Kernel, 1>(wt, w_stride, ab, act_stride, cols, n, ot, out_stride);
    }
  }
}

template <class Kernel>
constexpr DotEntry entry() {
  return {&dot<Kernel>, &gemm<Kernel>};
}

}  // namespace df::kernels::detail::DF_X86_LEVEL

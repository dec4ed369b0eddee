#pragma once
// Q4_0x16 weights (quant/q4_0x16.h) against Q8_0 activations. One vector holds the same four code bytes of
// sixteen rows, so an activation word broadcast to every lane feeds sixteen rows at once: no horizontal
// sums, no transposes, and the sixteen row results of a block land in the lanes where the row sums are.
// Per row and block the integer sum is exact (codes taken as q + 8 and 8 * sum(a) subtracted, as in
// x86_q8_family.h), then (float(sumi) * d_w) * d_a is added to the row's sum in block order: the
// reference's operations in the reference's order, so every output equals quant::vec_dot of the unpacked
// row bit for bit. A group is one sequential stream of bytes; how a thread walks the groups for decode (one
// stream or two, software prefetch hints or none) is chosen per CPU (weight_streams.h).
#include "backend/cpu/kernels/weight_streams.h"
#include "backend/cpu/kernels/x86_common.h"
#include "quant/q4_0x16.h"

namespace df::kernels::detail::DF_X86_LEVEL {

struct Q4_0x16Kernel {
  using WBlock = quant::BlockQ4_0x16;
  static constexpr int kRows = quant::kQ4_0x16Rows;
  // Activation rows that share one pass over a weight group (their accumulators stay in registers).
  static constexpr int kMaxCols = 4;
  // Blocks whose activation offsets are prepared at once; longer rows are done in chunks, the running sums
  // going through `out` between chunks (a float stored and reloaded is unchanged).
  static constexpr int kChunkBlocks = 128;

  // 8 * (sum of the block's 32 activation values), the offset of codes q + 8.
  static DF_X86_INLINE int32_t offset_sum(const BlockQ8_0& a) {
    const __m256i u = _mm256_xor_si256(load256(a.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
    const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
    const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    const int64_t total = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1);
    return 8 * (static_cast<int32_t>(total) - 32 * 128);
  }

  static DF_X86_INLINE __m256i word(const int8_t* p) {
    return _mm256_set1_epi32(static_cast<int>(read_u32(p)));
  }

#if defined(__AVX512F__)
  using Acc = __m512;
  static DF_X86_INLINE void zero(Acc& acc) { acc = _mm512_setzero_ps(); }
  static DF_X86_INLINE void load(Acc& acc, const float* p) { acc = _mm512_loadu_ps(p); }
  static DF_X86_INLINE void store(float* p, const Acc& acc) { _mm512_storeu_ps(p, acc); }

  // Block k of one group against the C activation rows, added into that group's accumulators.
  template <int C>
  static DF_X86_INLINE void block(const WBlock& b, const BlockQ8_0* const* a,
                                  const int32_t (*off)[kChunkBlocks], int k, Acc* acc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    // maskz forms: GCC 12 warns about the undefined source of the plain ones.
    const __m512 dw = _mm512_maskz_cvtph_ps(0xFFFF, load256(b.d));
    __m512i lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      const __m512i q = _mm512_loadu_si512(b.qs[j]);
      lo[j] = _mm512_and_si512(q, m4);
      hi[j] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    }
    for (int c = 0; c < C; ++c) {
      const BlockQ8_0& ab = a[c][k];
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        s0 = _mm512_dpbusd_epi32(s0, lo[j], _mm512_set1_epi32(static_cast<int>(read_u32(ab.qs + 4 * j))));
        s1 =
            _mm512_dpbusd_epi32(s1, hi[j], _mm512_set1_epi32(static_cast<int>(read_u32(ab.qs + 16 + 4 * j))));
      }
      const __m512i sumi = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(off[c][k]));
      const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, sumi), dw),
                                     _mm512_set1_ps(half_to_float(ab.d)));
      acc[c] = _mm512_add_ps(acc[c], v);
    }
  }
#else
  struct Acc {
    __m256 h[2];  // rows 0-7, rows 8-15
  };
  static DF_X86_INLINE void zero(Acc& acc) { acc.h[0] = acc.h[1] = _mm256_setzero_ps(); }
  static DF_X86_INLINE void load(Acc& acc, const float* p) {
    acc.h[0] = _mm256_loadu_ps(p);
    acc.h[1] = _mm256_loadu_ps(p + 8);
  }
  static DF_X86_INLINE void store(float* p, const Acc& acc) {
    _mm256_storeu_ps(p, acc.h[0]);
    _mm256_storeu_ps(p + 8, acc.h[1]);
  }

  // u8 x s8 pairs summed in int16: at most 2 * 15 * 128 per pair and eight pairs per lane, 30720 < 2^15.
  template <int C>
  static DF_X86_INLINE void block(const WBlock& b, const BlockQ8_0* const* a,
                                  const int32_t (*off)[kChunkBlocks], int k, Acc* acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = _mm256_cvtph_ps(load128(b.d + 8 * h));
      __m256i lo[4], hi[4];
      for (int j = 0; j < 4; ++j) {
        const __m256i q = load256(b.qs[j][8 * h]);
        lo[j] = _mm256_and_si256(q, m4);
        hi[j] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      }
      for (int c = 0; c < C; ++c) {
        const BlockQ8_0& ab = a[c][k];
        __m256i p = _mm256_maddubs_epi16(lo[0], word(ab.qs));
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[0], word(ab.qs + 16)));
        for (int j = 1; j < 4; ++j) {
          p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[j], word(ab.qs + 4 * j)));
          p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[j], word(ab.qs + 16 + 4 * j)));
        }
        const __m256i sumi = _mm256_sub_epi32(_mm256_madd_epi16(p, ones), _mm256_set1_epi32(off[c][k]));
        const __m256 v =
            _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sumi), dw), _mm256_set1_ps(half_to_float(ab.d)));
        acc[c].h[h] = _mm256_add_ps(acc[c].h[h], v);
      }
    }
  }
#endif

  // Blocks [0, n_blocks) of S groups walked side by side (S byte streams in flight at once), each group's
  // rows accumulating in acc[s]: every row still sums its blocks in order, whatever S is.
  template <int C, int S>
  static DF_X86_INLINE void blocks(const WBlock* const* w, const BlockQ8_0* const* a,
                                   const int32_t (*off)[kChunkBlocks], int n_blocks, Acc (*acc)[C], int pf) {
    for (int k = 0; k < n_blocks; ++k) {
      for (int s = 0; s < S; ++s) {
        if (pf)
          prefetch_span(reinterpret_cast<const uint8_t*>(w[s] + k), static_cast<size_t>(pf), sizeof(WBlock));
        block<C>(w[s][k], a, off, k, acc[s]);
      }
    }
  }

  // Groups g[0..S) of blocks [k0, k0 + n_blocks): accumulators from `out` (or zero for the first chunk),
  // the blocks, back to `out`.
  template <int C, int S>
  static DF_X86_INLINE void groups(const uint8_t* w, size_t group_bytes, const int64_t* g,
                                   const BlockQ8_0* const* ak, const int32_t (*off)[kChunkBlocks], int64_t k0,
                                   int n_blocks, float* out, size_t out_stride, int pf) {
    const WBlock* wg[S];
    Acc acc[S][C];
    for (int s = 0; s < S; ++s) {
      wg[s] = reinterpret_cast<const WBlock*>(w + static_cast<size_t>(g[s]) * group_bytes) + k0;
      for (int c = 0; c < C; ++c) {
        if (k0 == 0) {
          zero(acc[s][c]);
        } else {
          load(acc[s][c], out + static_cast<size_t>(c) * out_stride + static_cast<size_t>(g[s] * kRows));
        }
      }
    }
    blocks<C, S>(wg, ak, off, n_blocks, acc, pf);
    for (int s = 0; s < S; ++s)
      for (int c = 0; c < C; ++c)
        store(out + static_cast<size_t>(c) * out_stride + static_cast<size_t>(g[s] * kRows), acc[s][c]);
  }

  // C activation rows against `rows` rows (a multiple of 16) starting at group w. For one activation row
  // (decode) with two streams, the two halves of the groups are walked side by side.
  template <int C>
  static void cols(const uint8_t* w, size_t group_bytes, int64_t rows, const uint8_t* act, size_t act_stride,
                   int64_t nb, float* out, size_t out_stride) {
    const BlockQ8_0* a[C];
    for (int c = 0; c < C; ++c)
      a[c] = reinterpret_cast<const BlockQ8_0*>(act + static_cast<size_t>(c) * act_stride);
    int32_t off[C][kChunkBlocks];
    const WeightStreams& walk = weight_streams();
    const int pf = walk.prefetch_bytes;
    const int64_t n_groups = rows / kRows;
    const int64_t paired = C == 1 && walk.streams == 2 ? n_groups / 2 : 0;
    const int64_t half = n_groups - paired;  // groups [0, paired) go with [half, n_groups); the rest alone
    for (int64_t k0 = 0; k0 < nb; k0 += kChunkBlocks) {
      const int n_blocks = static_cast<int>(nb - k0 < kChunkBlocks ? nb - k0 : kChunkBlocks);
      for (int c = 0; c < C; ++c)
        for (int k = 0; k < n_blocks; ++k) off[c][k] = offset_sum(a[c][k0 + k]);
      const BlockQ8_0* ak[C];
      for (int c = 0; c < C; ++c) ak[c] = a[c] + k0;
      for (int64_t g = 0; g < paired; ++g) {
        const int64_t pair[2] = {g, g + half};
        groups<C, 2>(w, group_bytes, pair, ak, off, k0, n_blocks, out, out_stride, pf);
      }
      for (int64_t g = paired; g < half; ++g)
        groups<C, 1>(w, group_bytes, &g, ak, off, k0, n_blocks, out, out_stride, pf);
    }
  }

  // GemmFn over packed rows: w is the first row's group, w_stride the Q4_0 row bytes, rows a multiple of 16.
  static void gemm(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                   int64_t n_cols, int64_t n, float* out, size_t out_stride) {
    const auto* wb = static_cast<const uint8_t*>(w);
    const auto* ab = static_cast<const uint8_t*>(act);
    const int64_t nb = n / quant::QK4_0;
    const size_t group_bytes = w_stride * kRows;
    for (int64_t c = 0; c < n_cols; c += kMaxCols) {
      const uint8_t* ac = ab + static_cast<size_t>(c) * act_stride;
      float* oc = out + static_cast<size_t>(c) * out_stride;
      switch (n_cols - c < kMaxCols ? n_cols - c : kMaxCols) {
        case 1:
          cols<1>(wb, group_bytes, rows, ac, act_stride, nb, oc, out_stride);
          break;
        case 2:
          cols<2>(wb, group_bytes, rows, ac, act_stride, nb, oc, out_stride);
          break;
        case 3:
          cols<3>(wb, group_bytes, rows, ac, act_stride, nb, oc, out_stride);
          break;
        default:
          cols<4>(wb, group_bytes, rows, ac, act_stride, nb, oc, out_stride);
          break;
      }
    }
  }
};

}  // namespace df::kernels::detail::DF_X86_LEVEL

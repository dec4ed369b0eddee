#pragma once
// Weight formats of 32-value blocks dotted against Q8_0 (Q4_0, Q8_0, MXFP4) or Q8_1 (Q4_1) activations.
// Per block the integer sum is exact; groups of eight blocks then go through the float arithmetic of the
// reference lane by lane (one lane per block, same operations, no FMA), and the block results are added to
// the row's sum one at a time in block order, exactly as the reference loop does.
//
// Signed weights are made unsigned by an offset (Q4_0: q + 8 is the stored nibble; MXFP4: value + 12;
// Q8_0 with VNNI: q + 128) so that u8 x s8 instructions apply; the offset times the block's activation sum
// is subtracted from the integer sum, which stays exact for every input, -128 activations included.
#include "backend/cpu/kernels/x86_common.h"

namespace df::kernels::detail::DF_X86_LEVEL {

// Blocks are handled in pairs (2p, 2p + 1). A format's pair_dot returns 8 int32 partial sums, lanes 0-3
// for block 2p and 4-7 for block 2p + 1; the nibble formats get there by unpacking two blocks' nibbles into
// one vector each (low nibbles of both, high nibbles of both) against activations interleaved to match.
// sum_pairs turns four such vectors into the eight block sums, in block order.
template <class V>
DF_X86_INLINE __m256i sum_pairs(V&& v) {
  const __m256i t0 = _mm256_hadd_epi32(v(0), v(1));  // blocks 0 2 | 1 3, two partials each
  const __m256i t1 = _mm256_hadd_epi32(v(2), v(3));  // blocks 4 6 | 5 7
  const __m256i sums = _mm256_hadd_epi32(t0, t1);    // blocks 0 2 4 6 | 1 3 5 7
  return _mm256_permutevar8x32_epi32(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Two u8 x s8 dot products summed into 8 int32 lanes (exact for unsigned operands <= 24: the AVX2 form
// adds two int16 pair sums of at most 2 * 24 * 128 each before widening).
DF_X86_INLINE __m256i dot2_u8s8(__m256i u0, __m256i s0, __m256i u1, __m256i s1) {
#if DF_X86_VNNI
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u0, s0), u1, s1);
#else
  return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1)),
                           _mm256_set1_epi16(1));
#endif
}

// [lo | hi] from two 16-byte loads; a missing hi (past the row's last block) is zero.
DF_X86_INLINE __m256i two_halves(const void* lo, const void* hi_or_null) {
  const __m256i l = _mm256_zextsi128_si256(load128(lo));
  return hi_or_null ? _mm256_inserti128_si256(l, load128(hi_or_null), 1) : l;
}

// Formats with 4-bit codes in Q4_0's nibble order (Q4_0, Q4_1, MXFP4), dotted against Q8 blocks.
template <class ABlockT>
struct NibblePairs {
  // Activation vectors for blocks k, k + 1 (k + 1 < count or not): elements 0-15 of both, 16-31 of both.
  static DF_X86_INLINE void act_pair(const ABlockT* a, int k, int count, __m256i& a0, __m256i& a1) {
    const bool second = k + 1 < count;
    a0 = two_halves(a[k].qs, second ? a[k + 1].qs : nullptr);
    a1 = two_halves(a[k].qs + 16, second ? a[k + 1].qs + 16 : nullptr);
  }
  // Codes of blocks k, k + 1: low nibbles of both, high nibbles of both.
  template <class WBlockT>
  static DF_X86_INLINE void codes_pair(const WBlockT* w, int k, int count, __m256i& lo, __m256i& hi) {
    const __m256i q = two_halves(w[k].qs, k + 1 < count ? w[k + 1].qs : nullptr);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    lo = _mm256_and_si256(q, m4);
    hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  }
  static DF_X86_INLINE __m256i pair_dot(__m256i w0, __m256i w1, __m256i a0, __m256i a1) {
    return dot2_u8s8(w0, a0, w1, a1);
  }
};

// The activation side of a group of up to eight blocks, shared by the rows of a tile.
struct Q8Group {
  __m256i act[4][2];    // per block pair, the two activation vectors of the format's pair_dot
  __m256 d;             // activation scales
  __m256 s;             // Q8_1 only: the stored d * sum(q)
  __m256i offset_sums;  // kOffset * sum(q) per block, for formats with an offset
};

template <class F>
DF_X86_INLINE void prepare_group(const typename F::ABlock* a, int count, Q8Group& g) {
  for (int p = 0; p < 4; ++p) {
    if (2 * p < count) {
      F::act_pair(a, 2 * p, count, g.act[p][0], g.act[p][1]);
    } else {
      g.act[p][0] = g.act[p][1] = _mm256_setzero_si256();
    }
  }
  g.d = load_halves(&a[0].d, sizeof(typename F::ABlock), count);
  if constexpr (F::kHasSum) {
    g.s = load_halves(&a[0].s, sizeof(typename F::ABlock), count);
  } else {
    g.s = _mm256_setzero_ps();
  }
  if constexpr (F::kOffset != 0) {
    const __m256i ones = _mm256_set1_epi8(1);
    const __m256i sums = sum_pairs([&](int p) { return F::pair_dot(ones, ones, g.act[p][0], g.act[p][1]); });
    g.offset_sums = _mm256_mullo_epi32(sums, _mm256_set1_epi32(F::kOffset));
  } else {
    g.offset_sums = _mm256_setzero_si256();
  }
}

// A format F provides, besides the block types: act_pair / weight_pair (the two vectors of a block pair,
// zero past count) and pair_dot (see above); scales(blocks, count): its per-block float scales of a group;
// values(scales, group, sumi): the per-block float terms, with the reference's operations and order.
struct Q4_0Format : NibblePairs<BlockQ8_0> {
  using WBlock = BlockQ4_0;
  using ABlock = BlockQ8_0;
  static constexpr int kOffset = 8;
  static constexpr bool kHasSum = false;
  struct Scales {
    __m256 d;
  };
  static DF_X86_INLINE void weight_pair(const WBlock* w, int k, int count, __m256i& w0, __m256i& w1) {
    codes_pair(w, k, count, w0, w1);
  }
  static DF_X86_INLINE Scales scales(const WBlock* w, int count) {
    return {load_halves(&w[0].d, sizeof(WBlock), count)};
  }
  // (float(sumi) * d_w) * d_a
  static DF_X86_INLINE __m256 values(const Scales& ws, const Q8Group& g, __m256i sumi) {
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sumi), ws.d), g.d);
  }
};

struct Q4_1Format : NibblePairs<BlockQ8_1> {
  using WBlock = BlockQ4_1;
  using ABlock = BlockQ8_1;
  static constexpr int kOffset = 0;
  static constexpr bool kHasSum = true;
  struct Scales {
    __m256 d, m;
  };
  static DF_X86_INLINE void weight_pair(const WBlock* w, int k, int count, __m256i& w0, __m256i& w1) {
    codes_pair(w, k, count, w0, w1);
  }
  static DF_X86_INLINE Scales scales(const WBlock* w, int count) {
    return {load_halves(&w[0].d, sizeof(WBlock), count), load_halves(&w[0].m, sizeof(WBlock), count)};
  }
  // (d_w * d_a) * float(sumi) + m_w * s_a
  static DF_X86_INLINE __m256 values(const Scales& ws, const Q8Group& g, __m256i sumi) {
    return _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(ws.d, g.d), _mm256_cvtepi32_ps(sumi)),
                         _mm256_mul_ps(ws.m, g.s));
  }
};

// kMxfp4Values + 12, twice (one copy per 128-bit lane for vpshufb).
struct Mxfp4Table {
  int8_t v[32];
};
constexpr Mxfp4Table make_mxfp4_unsigned() {
  Mxfp4Table t{};
  for (int i = 0; i < 32; ++i) t.v[i] = static_cast<int8_t>(quant::kMxfp4Values[i % 16] + 12);
  return t;
}
inline constexpr Mxfp4Table kMxfp4Unsigned = make_mxfp4_unsigned();

// 2^(e - 128) per lane: the bits ARCHITECTURES.md 12.9 gives, e < 2 being float subnormals.
DF_X86_INLINE __m256 e8m0_half(__m256i e) {
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i is_subnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, is_subnormal));
}

struct Mxfp4Format : NibblePairs<BlockQ8_0> {
  using WBlock = BlockMXFP4;
  using ABlock = BlockQ8_0;
  static constexpr int kOffset = 12;
  static constexpr bool kHasSum = false;
  struct Scales {
    __m256 e;
  };
  static DF_X86_INLINE void weight_pair(const WBlock* w, int k, int count, __m256i& w0, __m256i& w1) {
    const __m256i table = load256(kMxfp4Unsigned.v);
    codes_pair(w, k, count, w0, w1);
    w0 = _mm256_shuffle_epi8(table, w0);  // a missing block's zero codes become 12: its activations are zero
    w1 = _mm256_shuffle_epi8(table, w1);
  }
  static DF_X86_INLINE Scales scales(const WBlock* w, int count) {
    auto e = [&](int k) { return k < count ? static_cast<int>(w[k].e) : 0; };
    return {e8m0_half(_mm256_setr_epi32(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7)))};
  }
  // (d_a * 2^(e-128)) * float(sumi)
  static DF_X86_INLINE __m256 values(const Scales& ws, const Q8Group& g, __m256i sumi) {
    return _mm256_mul_ps(_mm256_mul_ps(g.d, ws.e), _mm256_cvtepi32_ps(sumi));
  }
};

struct Q8_0Format {
  using WBlock = BlockQ8_0;
  using ABlock = BlockQ8_0;
#if DF_X86_VNNI
  static constexpr int kOffset = 128;
#else
  static constexpr int kOffset = 0;
#endif
  static constexpr bool kHasSum = false;
  struct Scales {
    __m256 d;
  };
  static DF_X86_INLINE void act_pair(const ABlock* a, int k, int count, __m256i& a0, __m256i& a1) {
    a0 = load256(a[k].qs);
    a1 = k + 1 < count ? load256(a[k + 1].qs) : _mm256_setzero_si256();
  }
  static DF_X86_INLINE __m256i weights(const WBlock& w) {
#if DF_X86_VNNI
    return _mm256_xor_si256(load256(w.qs), _mm256_set1_epi8(static_cast<char>(0x80)));  // q + 128
#else
    return load256(w.qs);
#endif
  }
  static DF_X86_INLINE void weight_pair(const WBlock* w, int k, int count, __m256i& w0, __m256i& w1) {
    w0 = weights(w[k]);
    w1 = k + 1 < count ? weights(w[k + 1]) : _mm256_setzero_si256();
  }
  // 8 int32 partial sums of one block.
  static DF_X86_INLINE __m256i dot(__m256i w, __m256i a) {
#if DF_X86_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a);
#else
    // Both operands signed and full range: widen to int16, where the products are exact.
    const __m256i lo = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(w)),
                                         _mm256_cvtepi8_epi16(_mm256_castsi256_si128(a)));
    const __m256i hi = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(w, 1)),
                                         _mm256_cvtepi8_epi16(_mm256_extracti128_si256(a, 1)));
    return _mm256_add_epi32(lo, hi);
#endif
  }
  static DF_X86_INLINE __m256i pair_dot(__m256i w0, __m256i w1, __m256i a0, __m256i a1) {
    const __m256i d0 = dot(w0, a0), d1 = dot(w1, a1);
    return _mm256_add_epi32(_mm256_permute2x128_si256(d0, d1, 0x20), _mm256_permute2x128_si256(d0, d1, 0x31));
  }
  static DF_X86_INLINE Scales scales(const WBlock* w, int count) {
    return {load_halves(&w[0].d, sizeof(WBlock), count)};
  }
  // float(sumi) * (d_w * d_a)
  static DF_X86_INLINE __m256 values(const Scales& ws, const Q8Group& g, __m256i sumi) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), _mm256_mul_ps(ws.d, g.d));
  }
};

// Adds the first `count` block terms of four rows (v0..v3) to the four lanes of sum, block by block: a
// transpose puts block k of every row in one vector, so each lane sees its row's terms in block order.
DF_X86_INLINE __m128 add_in_order_4rows(__m128 sum, __m256 v0, __m256 v1, __m256 v2, __m256 v3, int count) {
  const __m256d t0 = _mm256_castps_pd(_mm256_unpacklo_ps(v0, v1));  // rows 0,1 of blocks 0,1 | 4,5
  const __m256d t1 = _mm256_castps_pd(_mm256_unpackhi_ps(v0, v1));  // rows 0,1 of blocks 2,3 | 6,7
  const __m256d t2 = _mm256_castps_pd(_mm256_unpacklo_ps(v2, v3));
  const __m256d t3 = _mm256_castps_pd(_mm256_unpackhi_ps(v2, v3));
  const __m256 b[4] = {
      _mm256_castpd_ps(_mm256_unpacklo_pd(t0, t2)), _mm256_castpd_ps(_mm256_unpackhi_pd(t0, t2)),
      _mm256_castpd_ps(_mm256_unpacklo_pd(t1, t3)), _mm256_castpd_ps(_mm256_unpackhi_pd(t1, t3))};
  for (int k = 0; k < count && k < 4; ++k) sum = _mm_add_ps(sum, _mm256_castps256_ps128(b[k]));
  for (int k = 4; k < count; ++k) sum = _mm_add_ps(sum, _mm256_extractf128_ps(b[k - 4], 1));
  return sum;
}

template <class F>
struct Q8Kernel {
  using WBlock = typename F::WBlock;
  using ABlock = typename F::ABlock;

  // The float terms of one row's group against one activation group; wpair(p, w0, w1) yields the weight
  // vectors of block pair p.
  template <class WPair>
  static DF_X86_INLINE __m256 group_values(WPair&& wpair, int count, const typename F::Scales& ws,
                                           const Q8Group& g) {
    __m256i sumi = sum_pairs([&](int p) {
      if (2 * p >= count) return _mm256_setzero_si256();
      __m256i w0, w1;
      wpair(p, w0, w1);
      return F::pair_dot(w0, w1, g.act[p][0], g.act[p][1]);
    });
    if constexpr (F::kOffset != 0) sumi = _mm256_sub_epi32(sumi, g.offset_sums);
    return F::values(ws, g, sumi);
  }

  template <int R, int C>
  static DF_X86_INLINE void add_group(float (*sum)[4], int c, const __m256* v, int count) {
    if constexpr (R == 4) {
      _mm_storeu_ps(sum[c], add_in_order_4rows(_mm_loadu_ps(sum[c]), v[0], v[1], v[2], v[3], count));
    } else {
      for (int r = 0; r < R; ++r) add_in_order(sum[c][r], v[r], count);
    }
  }

  // One group of `count` (<= 8) blocks starting at w (row 0) and a[c] (activation row c); sum[c][r] is the
  // running sum of row r against activation row c.
  template <int R, int C>
  static DF_X86_INLINE void group(const uint8_t* w, size_t w_stride, const ABlock* const* a, int count,
                                  float (*sum)[4]) {
    Q8Group g[C];
    for (int c = 0; c < C; ++c) prepare_group<F>(a[c], count, g[c]);
    const WBlock* wb[R];
    for (int r = 0; r < R; ++r) wb[r] = reinterpret_cast<const WBlock*>(w + r * w_stride);
    if constexpr (C == 1) {
      // Unpacked on the fly.
      __m256 v[R];
      for (int r = 0; r < R; ++r) {
        auto wpair = [&](int p, __m256i& w0, __m256i& w1) { F::weight_pair(wb[r], 2 * p, count, w0, w1); };
        v[r] = group_values(wpair, count, F::scales(wb[r], count), g[0]);
      }
      add_group<R, C>(sum, 0, v, count);
    } else {
      // Unpacked once into a buffer, then dotted with every activation row.
      __m256i wq[R][4][2];
      typename F::Scales ws[R];
      for (int r = 0; r < R; ++r) {
        for (int p = 0; p < 4; ++p) {
          if (2 * p < count) {
            F::weight_pair(wb[r], 2 * p, count, wq[r][p][0], wq[r][p][1]);
          } else {
            wq[r][p][0] = wq[r][p][1] = _mm256_setzero_si256();
          }
        }
        ws[r] = F::scales(wb[r], count);
      }
      for (int c = 0; c < C; ++c) {
        __m256 v[R];
        for (int r = 0; r < R; ++r) {
          auto wpair = [&](int p, __m256i& w0, __m256i& w1) {
            w0 = wq[r][p][0];
            w1 = wq[r][p][1];
          };
          v[r] = group_values(wpair, count, ws[r], g[c]);
        }
        add_group<R, C>(sum, c, v, count);
      }
    }
  }

  template <int R, int C>
  static void tile(const uint8_t* w, size_t w_stride, const uint8_t* act, size_t act_stride, int64_t n,
                   float* out, size_t out_stride) {
    const int64_t nb = n / quant::QK8_0;
    float sum[C][4] = {};
    const ABlock* a[C];
    for (int c = 0; c < C; ++c) a[c] = reinterpret_cast<const ABlock*>(act + c * act_stride);
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
      for (int r = 0; r < R; ++r)
        prefetch_span(w, (r + kPrefetchTiles * R) * w_stride + i * sizeof(WBlock), 8 * sizeof(WBlock));
      group<R, C>(w + i * sizeof(WBlock), w_stride, a, 8, sum);
      for (int c = 0; c < C; ++c) a[c] += 8;
    }
    if (i < nb) group<R, C>(w + i * sizeof(WBlock), w_stride, a, static_cast<int>(nb - i), sum);
    for (int c = 0; c < C; ++c) {
      for (int r = 0; r < R; ++r) out[c * out_stride + r] = sum[c][r];
    }
  }
};

}  // namespace df::kernels::detail::DF_X86_LEVEL

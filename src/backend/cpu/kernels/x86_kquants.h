#pragma once
// Q4_K, Q5_K, Q6_K against Q8_K activations. The reference keeps eight integer sums per super-block, sum l
// taking the elements j with j % 8 == l, and eight float lanes fed by them; the kernels compute the same
// eight integers, so the float work (per super-block: lanes += d * float(sum_l), and the mins term) and the
// final order of additions are the reference's, and the result is bit-identical.
//
// How the eight sums come out without a horizontal reduction: the 16 bytes of each 128-bit half of a
// 32-value chunk are permuted so that elements j and j + 8 sit side by side, in both the weights and the
// activation. vpmaddubsw then yields 8 int16 pair sums per half, one per residue l. Two chunks with their
// own scales are interleaved (vpunpck{l,h}wd) and vpmaddwd / vpdpwssd multiplies each pair sum by its scale
// and adds the two chunks: int32 lanes hold residues 0-3 (from the low unpack) and 4-7 (high unpack) of each
// 128-bit half, and a final cross-half add puts residue l in lane l.
#include "backend/cpu/kernels/x86_common.h"

namespace df::kernels::detail::DF_X86_LEVEL {

// Within each 128-bit half: bytes 0,8,1,9,...,7,15.
DF_X86_INLINE __m256i residue_pairs_mask() {
  return _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,  //
                          0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
}

// The activation of one super-block, permuted once for all the rows of a tile.
struct KAct {
  alignas(32) int8_t q[256];        // quants, residue-paired within each 16 bytes
  alignas(32) int16_t pair32[128];  // Q6_K: 32 * (a_j + a_j+8) per pair, to take away the offset of 32
};

template <bool kPair32>
DF_X86_INLINE void prepare_kact(const BlockQ8_K& a, KAct& out) {
  const __m256i pm = residue_pairs_mask();
  for (int k = 0; k < 8; ++k) {
    const __m256i q = _mm256_shuffle_epi8(load256(a.qs + 32 * k), pm);
    store256(out.q + 32 * k, q);
    if constexpr (kPair32) store256(out.pair32 + 16 * k, _mm256_maddubs_epi16(_mm256_set1_epi8(32), q));
  }
}

// Residue l of (acc_lo: residues 0-3 | 0-3, acc_hi: residues 4-7 | 4-7) summed over both halves, in lane l.
DF_X86_INLINE __m256i fold_residues(__m256i acc_lo, __m256i acc_hi) {
  return _mm256_add_epi32(_mm256_permute2x128_si256(acc_lo, acc_hi, 0x20),
                          _mm256_permute2x128_si256(acc_lo, acc_hi, 0x31));
}

// acc += interleaved pair sums of two chunks times their scales (pattern: int16 scale pairs).
DF_X86_INLINE void add_scaled_pairs(__m256i p0, __m256i p1, __m256i pattern, __m256i& acc_lo,
                                    __m256i& acc_hi) {
  acc_lo = madd_acc(acc_lo, _mm256_unpacklo_epi16(p0, p1), pattern);
  acc_hi = madd_acc(acc_hi, _mm256_unpackhi_epi16(p0, p1), pattern);
}

// Q4_K / Q5_K: the eight 6-bit scales and mins, one byte each (ARCHITECTURES.md 12.5), as two 8-byte words.
DF_X86_INLINE void unpack_scales_mins(const uint8_t* s, uint64_t& scales, uint64_t& mins) {
  const uint32_t w0 = read_u32(s), w1 = read_u32(s + 4), w2 = read_u32(s + 8);
  const uint32_t sc_lo = w0 & 0x3F3F3F3Fu;
  const uint32_t m_lo = w1 & 0x3F3F3F3Fu;
  // Sub-blocks 4..7: low 4 bits from bytes 8..11, high 2 bits from the top bits of bytes 0..3 / 4..7.
  const uint32_t sc_hi = (w2 & 0x0F0F0F0Fu) | ((w0 >> 2) & 0x30303030u);
  const uint32_t m_hi = ((w2 >> 4) & 0x0F0F0F0Fu) | ((w1 >> 2) & 0x30303030u);
  scales = sc_lo | (static_cast<uint64_t>(sc_hi) << 32);
  mins = m_lo | (static_cast<uint64_t>(m_hi) << 32);
}

// sum_g bsums[g] * mins[g / 2]
DF_X86_INLINE int32_t sum_mins(const BlockQ8_K& a, uint64_t mins) {
  const __m128i m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mins)));
  const __m256i m_dup = _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
  return sum_lanes(_mm256_madd_epi16(load256(a.bsums), m_dup));
}

// The eight residue sums of a Q4_K / Q5_K super-block against C activation rows.
template <bool kFifthBit, int C>
DF_X86_INLINE void q45k_residues(const uint8_t* qs, const uint8_t* qh, uint64_t scales, const KAct* act,
                                 __m256i* res) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  const __m256i pm = residue_pairs_mask();
  // Chunk k (64 values) holds sub-blocks 2k (low nibbles) and 2k + 1 (high nibbles): its scale pair is
  // 32-bit element k of the widened scales.
  const __m256i s16 =
      _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(scales))));
  const __m256i pattern[4] = {_mm256_shuffle_epi32(s16, 0x00), _mm256_shuffle_epi32(s16, 0x55),
                              _mm256_shuffle_epi32(s16, 0xAA), _mm256_shuffle_epi32(s16, 0xFF)};
  __m256i high_bits = kFifthBit ? load256(qh) : _mm256_setzero_si256();
  __m256i acc_lo[C], acc_hi[C];
  for (int c = 0; c < C; ++c) acc_lo[c] = acc_hi[c] = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    const __m256i q = load256(qs + 32 * k);
    __m256i lo = _mm256_and_si256(q, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if constexpr (kFifthBit) {
      // Bits 2k and 2k + 1 of qh (moved to bits 0 and 1 by the shifts so far) become 16.
      lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(high_bits, 4), bit4));
      hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(high_bits, 3), bit4));
      high_bits = _mm256_srli_epi16(high_bits, 2);
    }
    lo = _mm256_shuffle_epi8(lo, pm);
    hi = _mm256_shuffle_epi8(hi, pm);
    for (int c = 0; c < C; ++c) {
      const __m256i p0 = _mm256_maddubs_epi16(lo, load256(act[c].q + 64 * k));
      const __m256i p1 = _mm256_maddubs_epi16(hi, load256(act[c].q + 64 * k + 32));
      add_scaled_pairs(p0, p1, pattern[k], acc_lo[c], acc_hi[c]);
    }
  }
  for (int c = 0; c < C; ++c) res[c] = fold_residues(acc_lo[c], acc_hi[c]);
}

// The eight residue sums of a Q6_K super-block against C activation rows.
template <int C>
DF_X86_INLINE void q6k_residues(const BlockQ6_K& w, const KAct* act, __m256i* res) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m256i pm = residue_pairs_mask();
  // Chunks k and k + 1 (k even) hold sub-blocks 2k..2k+3 of 16 values; their pair sums are interleaved, so
  // pattern p = k / 2 is (sc[4p], sc[4p+2]) in the low half and (sc[4p+1], sc[4p+3]) in the high half.
  const __m128i sc = load128(w.scales);
  __m256i pattern[4];
  for (int p = 0; p < 4; ++p) {
    const char a = static_cast<char>(4 * p), b = static_cast<char>(4 * p + 1);
    const char c = static_cast<char>(4 * p + 2), d = static_cast<char>(4 * p + 3);
    pattern[p] = _mm256_cvtepi8_epi16(
        _mm_shuffle_epi8(sc, _mm_setr_epi8(a, c, a, c, a, c, a, c, b, d, b, d, b, d, b, d)));
  }
  __m256i acc_lo[C], acc_hi[C];
  for (int c = 0; c < C; ++c) acc_lo[c] = acc_hi[c] = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load256(w.ql + 64 * h), ql1 = load256(w.ql + 64 * h + 32);
    const __m256i qh = load256(w.qh + 32 * h);
    // 6-bit quants (ARCHITECTURES.md 12.7) of chunks 4h .. 4h+3, 32 values each in element order, stored as
    // q + 32, residue-paired.
    const __m256i q[4] = {
        _mm256_shuffle_epi8(
            _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)), pm),
        _mm256_shuffle_epi8(
            _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)), pm),
        _mm256_shuffle_epi8(
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)), pm),
        _mm256_shuffle_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
                            pm),
    };
    for (int j = 0; j < 2; ++j) {
      const int k = 4 * h + 2 * j;
      for (int c = 0; c < C; ++c) {
        // Subtract 32 * (a_j + a_j+8) from each pair sum to undo the offset of 32.
        const __m256i p0 = _mm256_sub_epi16(_mm256_maddubs_epi16(q[2 * j], load256(act[c].q + 32 * k)),
                                            load256(act[c].pair32 + 16 * k));
        const __m256i p1 =
            _mm256_sub_epi16(_mm256_maddubs_epi16(q[2 * j + 1], load256(act[c].q + 32 * k + 32)),
                             load256(act[c].pair32 + 16 * k + 16));
        add_scaled_pairs(p0, p1, pattern[k / 2], acc_lo[c], acc_hi[c]);
      }
    }
  }
  for (int c = 0; c < C; ++c) res[c] = fold_residues(acc_lo[c], acc_hi[c]);
}

struct Q4KFormat {
  using WBlock = BlockQ4_K;
  static constexpr bool kHasMins = true, kPair32 = false;
  template <int C>
  static DF_X86_INLINE void residues(const WBlock& w, const KAct* act, uint64_t scales, __m256i* res) {
    q45k_residues<false, C>(w.qs, nullptr, scales, act, res);
  }
};

struct Q5KFormat {
  using WBlock = BlockQ5_K;
  static constexpr bool kHasMins = true, kPair32 = false;
  template <int C>
  static DF_X86_INLINE void residues(const WBlock& w, const KAct* act, uint64_t scales, __m256i* res) {
    q45k_residues<true, C>(w.qs, w.qh, scales, act, res);
  }
};

struct Q6KFormat {
  using WBlock = BlockQ6_K;
  static constexpr bool kHasMins = false, kPair32 = true;
  template <int C>
  static DF_X86_INLINE void residues(const WBlock& w, const KAct* act, uint64_t, __m256i* res) {
    q6k_residues<C>(w, act, res);
  }
};

template <class F>
struct KQuantKernel {
  using WBlock = typename F::WBlock;

  template <int R, int C>
  static void tile(const uint8_t* w, size_t w_stride, const uint8_t* act, size_t act_stride, int64_t n,
                   float* out, size_t out_stride) {
    const int64_t nb = n / quant::QK_K;
    __m256 lanes[R][C];
    float sum[R][C];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        lanes[r][c] = _mm256_setzero_ps();
        sum[r][c] = 0.0f;
      }
    }
    KAct prepared[C];
    for (int64_t i = 0; i < nb; ++i) {
      for (int r = 0; r < R; ++r)
        prefetch_span(w, (r + kPrefetchTiles * R) * w_stride + i * sizeof(WBlock), sizeof(WBlock));
      const BlockQ8_K* a[C];
      for (int c = 0; c < C; ++c) {
        a[c] = reinterpret_cast<const BlockQ8_K*>(act + c * act_stride) + i;
        prepare_kact<F::kPair32>(*a[c], prepared[c]);
      }
      for (int r = 0; r < R; ++r) {
        const WBlock& b = reinterpret_cast<const WBlock*>(w + r * w_stride)[i];
        uint64_t scales = 0, mins = 0;
        if constexpr (F::kHasMins) unpack_scales_mins(b.scales, scales, mins);
        __m256i res[C];
        F::template residues<C>(b, prepared, scales, res);
        const float dw = half_to_float(b.d);
        for (int c = 0; c < C; ++c) {
          const float d = dw * a[c]->d;
          lanes[r][c] =
              _mm256_add_ps(lanes[r][c], _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(res[c])));
          if constexpr (F::kHasMins) {
            const float dmin = half_to_float(b.dmin) * a[c]->d;
            sum[r][c] -= dmin * static_cast<float>(sum_mins(*a[c], mins));
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        add_in_order(sum[r][c], lanes[r][c], 8);
        out[c * out_stride + r] = sum[r][c];
      }
    }
  }
};

}  // namespace df::kernels::detail::DF_X86_LEVEL

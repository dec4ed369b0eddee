#pragma once
// Activation quantizers, byte for byte those of quant::quantize_activation. The vector path handles blocks
// of finite values, for which the reference's rounding is reproduced exactly (round half away from zero
// for Q8_0/Q8_1, half to even for Q8_K, f16 conversion to nearest even); a block holding an infinity or a
// NaN, where the reference's quirks (NaN scales, int8 truncation of INT_MIN) matter, is handed to the
// reference itself.
#include <cfloat>

#include "backend/cpu/kernels/x86_common.h"

namespace df::kernels::detail::DF_X86_LEVEL {

DF_X86_INLINE __m256 abs_ps(__m256 v) {
  return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
}

// Accumulates the running max of |v| and whether every value seen was finite.
DF_X86_INLINE void track_abs_max(__m256 v, __m256& amax, __m256& finite) {
  const __m256 a = abs_ps(v);
  finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_LE_OQ));
  amax = _mm256_max_ps(amax, a);
}
DF_X86_INLINE bool all_lanes(__m256 mask) { return _mm256_movemask_ps(mask) == 0xFF; }
DF_X86_INLINE __m256 all_true() { return _mm256_castsi256_ps(_mm256_set1_epi32(-1)); }

DF_X86_INLINE float max_lanes(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// std::round: half away from zero. v - trunc(v) is exact, so the comparison with 0.5 is too.
DF_X86_INLINE __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 reached = _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 signed_one = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(t, _mm256_and_ps(reached, signed_one));
}

// The low byte of each of 4 x 8 int32 (a C conversion to int8_t), in order.
DF_X86_INLINE __m256i low_bytes(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
  const __m256i ff = _mm256_set1_epi32(0xFF);
  const __m256i w01 = _mm256_packus_epi32(_mm256_and_si256(i0, ff), _mm256_and_si256(i1, ff));
  const __m256i w23 = _mm256_packus_epi32(_mm256_and_si256(i2, ff), _mm256_and_si256(i3, ff));
  // packus works within 128-bit halves, leaving the groups of four in the order 0 2 4 6 1 3 5 7.
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

DF_X86_INLINE uint16_t float_to_half(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

// One Q8_0 / Q8_1 block of finite values (quant/q8_0.cpp). Returns false, writing nothing, otherwise.
template <bool kWithSum, class Block>
DF_X86_INLINE bool quantize_q8_block(const float* x, Block& y) {
  __m256 v[4], amax = _mm256_setzero_ps(), finite = all_true();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    track_abs_max(v[k], amax, finite);
  }
  if (!all_lanes(finite)) return false;
  const float d = max_lanes(amax) / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  __m256i q[4];
  for (int k = 0; k < 4; ++k)
    q[k] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v[k], _mm256_set1_ps(id))));
  store256(y.qs, low_bytes(q[0], q[1], q[2], q[3]));
  y.d = float_to_half(d);
  if constexpr (kWithSum) {
    // |x * id| <= 127 for finite x, so the int32 values are the stored int8 ones.
    const int32_t sum =
        sum_lanes(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    y.s = float_to_half(static_cast<float>(sum) * d);
  }
  return true;
}

template <class Block, GgmlType kType>
void quantize_q8_row(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / quant::QK8_0; ++i) {
    if (!quantize_q8_block<kType == GgmlType::Q8_1>(x + i * quant::QK8_0, y[i]))
      quant::quantize_activation(kType, x + i * quant::QK8_0, &y[i], quant::QK8_0);
  }
}

// One Q8_K block of finite values (quant/q8_k.cpp). Returns false, writing nothing, otherwise.
DF_X86_INLINE bool quantize_q8k_block(const float* x, BlockQ8_K& y) {
  __m256 amax = _mm256_setzero_ps(), finite = all_true();
  for (int k = 0; k < 32; ++k) track_abs_max(_mm256_loadu_ps(x + 8 * k), amax, finite);
  if (!all_lanes(finite)) return false;
  const float am = max_lanes(amax);
  if (am == 0.0f) {
    std::memset(&y, 0, sizeof y);
    return true;
  }
  // The reference keeps the first value of largest magnitude, with its sign.
  float max = 0.0f;
  for (int k = 0; k < 32; ++k) {
    const int hit =
        _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + 8 * k)), _mm256_set1_ps(am), _CMP_EQ_OQ));
    if (hit != 0) {
      max = x[8 * k + __builtin_ctz(static_cast<unsigned>(hit))];
      break;
    }
  }
  const float iscale = -127.f / max;
  // A float-subnormal extreme overflows iscale; only finite scales keep the quants within +-127.
  if (!__builtin_isfinite(iscale)) return false;
  const __m256 vs = _mm256_set1_ps(iscale);
  const __m256i cap = _mm256_set1_epi32(127);
  __m256i group_sums[16];  // 8 int32 lanes per group of 16 values
  for (int c = 0; c < 8; ++c) {
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      // cvtps rounds half to even, as nearest_int does for |v| < 2^22 (here |v| <= 127).
      q[k] =
          _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + 32 * c + 8 * k))), cap);
    }
    store256(y.qs + 32 * c, low_bytes(q[0], q[1], q[2], q[3]));
    group_sums[2 * c] = _mm256_add_epi32(q[0], q[1]);
    group_sums[2 * c + 1] = _mm256_add_epi32(q[2], q[3]);
  }
  const __m256i lo = sum_lanes_8x8([&](int g) { return group_sums[g]; });
  const __m256i hi = sum_lanes_8x8([&](int g) { return group_sums[8 + g]; });
  store256(y.bsums, _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8));
  y.d = 1 / iscale;
  return true;
}

inline void quantize_q8k_row(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / quant::QK_K; ++i) {
    if (!quantize_q8k_block(x + i * quant::QK_K, y[i]))
      quant::quantize_activation(GgmlType::Q8_K, x + i * quant::QK_K, &y[i], quant::QK_K);
  }
}

inline void quantize_f16_row(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint8_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) == 0) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + 2 * i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
      continue;
    }
    // NaN: the reference makes every NaN 0x7E00 | sign, the instruction keeps payload bits.
    for (int64_t j = i; j < i + 8; ++j) {
      const uint16_t h = quant::fp32_to_fp16(x[j]);
      std::memcpy(y + 2 * j, &h, sizeof h);
    }
  }
  for (; i < n; ++i) {
    const uint16_t h = quant::fp32_to_fp16(x[i]);
    std::memcpy(y + 2 * i, &h, sizeof h);
  }
}

}  // namespace df::kernels::detail::DF_X86_LEVEL

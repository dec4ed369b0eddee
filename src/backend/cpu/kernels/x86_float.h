#pragma once
// F32, F16 and BF16 rows. Each product is rounded to float as in the reference (for F16 and BF16 it is
// exact), then summed in double; the reference sums sequentially, these kernels in eight double lanes, so
// their results differ by the rounding of a reordered double sum (the tolerance in vec_dot.h).
#include "backend/cpu/kernels/x86_common.h"

namespace df::kernels::detail::DF_X86_LEVEL {

struct F32Loader {
  using Elem = float;
  static DF_X86_INLINE __m256 load8(const Elem* p) { return _mm256_loadu_ps(p); }
  static DF_X86_INLINE float one(const Elem* p) {
    float f;
    std::memcpy(&f, p, sizeof f);  // rows need not be 4-byte aligned
    return f;
  }
};
struct F16Loader {
  using Elem = uint16_t;
  static DF_X86_INLINE __m256 load8(const Elem* p) { return _mm256_cvtph_ps(load128(p)); }
  static DF_X86_INLINE float one(const Elem* p) { return half_to_float(read_u16(p)); }
};
struct BF16Loader {
  using Elem = uint16_t;
  static DF_X86_INLINE __m256 load8(const Elem* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
  }
  static DF_X86_INLINE float one(const Elem* p) {
    const uint32_t bits = static_cast<uint32_t>(read_u16(p)) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

DF_X86_INLINE __m256d widen_lo(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
DF_X86_INLINE __m256d widen_hi(__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }

template <class L>
float float_dot(const typename L::Elem* x, const typename L::Elem* y, int64_t n) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  __m256d acc2 = _mm256_setzero_pd(), acc3 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 p0 = _mm256_mul_ps(L::load8(x + i), L::load8(y + i));
    const __m256 p1 = _mm256_mul_ps(L::load8(x + i + 8), L::load8(y + i + 8));
    acc0 = _mm256_add_pd(acc0, widen_lo(p0));
    acc1 = _mm256_add_pd(acc1, widen_hi(p0));
    acc2 = _mm256_add_pd(acc2, widen_lo(p1));
    acc3 = _mm256_add_pd(acc3, widen_hi(p1));
  }
  if (i + 8 <= n) {
    const __m256 p0 = _mm256_mul_ps(L::load8(x + i), L::load8(y + i));
    acc0 = _mm256_add_pd(acc0, widen_lo(p0));
    acc1 = _mm256_add_pd(acc1, widen_hi(p0));
    i += 8;
  }
  const __m256d acc = _mm256_add_pd(_mm256_add_pd(acc0, acc1), _mm256_add_pd(acc2, acc3));
  const __m128d pair = _mm_add_pd(_mm256_castpd256_pd128(acc), _mm256_extractf128_pd(acc, 1));
  double sum = _mm_cvtsd_f64(_mm_add_sd(pair, _mm_unpackhi_pd(pair, pair)));
  for (; i < n; ++i) sum += static_cast<double>(L::one(x + i) * L::one(y + i));
  return static_cast<float>(sum);
}

template <class L>
struct FloatKernel {
  using Elem = typename L::Elem;
  template <int R, int C>
  static void tile(const uint8_t* w, size_t w_stride, const uint8_t* act, size_t act_stride, int64_t n,
                   float* out, size_t out_stride) {
    for (int c = 0; c < C; ++c) {
      for (int r = 0; r < R; ++r) {
        out[c * out_stride + r] = float_dot<L>(reinterpret_cast<const Elem*>(w + r * w_stride),
                                               reinterpret_cast<const Elem*>(act + c * act_stride), n);
      }
    }
  }
};

}  // namespace df::kernels::detail::DF_X86_LEVEL

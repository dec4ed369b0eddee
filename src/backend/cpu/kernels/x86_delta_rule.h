#pragma once
// The gated delta rule's per-token step (delta_rule.h) with ggml's AVX vector helpers: GGML_F32_STEP values
// per iteration in four accumulators of 8 lanes (__m256), as ggml-cpu's simd-mappings.h defines them for
// __AVX__. The AVX-512 level runs the same 256-bit code (and the scalar level emulates it lane by lane), so
// every level gives the same bits; ggml's own AVX-512 build sums in 16 lanes, a rounding-level difference.
// Multiply-adds are explicit FMAs where ggml's GGML_F32_VEC_FMA is one; the scalar remainders are plain float
// operations (contraction is off, x86_common.h).
#include "backend/cpu/kernels/x86_common.h"

namespace df::kernels::detail::DF_X86_LEVEL {

struct F32Vec {
  using V = __m256;
  static constexpr int kLanes = 8;
  static DF_X86_INLINE V zero() { return _mm256_setzero_ps(); }
  static DF_X86_INLINE V set1(float x) { return _mm256_set1_ps(x); }
  static DF_X86_INLINE V load(const float* p) { return _mm256_loadu_ps(p); }
  static DF_X86_INLINE void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static DF_X86_INLINE V add(V a, V b) { return _mm256_add_ps(a, b); }
  static DF_X86_INLINE V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static DF_X86_INLINE V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }  // a·b + c
  // The tail of GGML_F32x8_REDUCE: the two 128-bit halves, then two horizontal adds.
  static DF_X86_INLINE float reduce(V v) {
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
  }
};

// GGML_F32_VEC_REDUCE of the four accumulators (GGML_F32_ARR = 4): acc0 + acc2, acc1 + acc3, then their sum.
DF_X86_INLINE float reduce4(F32Vec::V a0, F32Vec::V a1, F32Vec::V a2, F32Vec::V a3) {
  return F32Vec::reduce(F32Vec::add(F32Vec::add(a0, a2), F32Vec::add(a1, a3)));
}

// One row j of S through the four steps. np = d & ~(GGML_F32_STEP - 1).
DF_X86_INLINE void delta_rule_row(float* s, int64_t d, int64_t np, const float* q, const float* k, float v,
                                  float decay, float beta, float scale, float* out) {
  using F = F32Vec;
  constexpr int L = F::kLanes;
  // S_j · decay (ggml_vec_scale_f32: one product per value, whatever the vector width), and dot(S_j, k).
  const F::V vdecay = F::set1(decay);
  F::V a0 = F::zero(), a1 = F::zero(), a2 = F::zero(), a3 = F::zero();
  for (int64_t i = 0; i < np; i += 4 * L) {
    const F::V s0 = F::mul(F::load(s + i), vdecay);
    const F::V s1 = F::mul(F::load(s + i + L), vdecay);
    const F::V s2 = F::mul(F::load(s + i + 2 * L), vdecay);
    const F::V s3 = F::mul(F::load(s + i + 3 * L), vdecay);
    F::store(s + i, s0);
    F::store(s + i + L, s1);
    F::store(s + i + 2 * L, s2);
    F::store(s + i + 3 * L, s3);
    a0 = F::fma(s0, F::load(k + i), a0);
    a1 = F::fma(s1, F::load(k + i + L), a1);
    a2 = F::fma(s2, F::load(k + i + 2 * L), a2);
    a3 = F::fma(s3, F::load(k + i + 3 * L), a3);
  }
  float sk = reduce4(a0, a1, a2, a3);
  for (int64_t i = np; i < d; ++i) {
    s[i] *= decay;
    sk += s[i] * k[i];
  }
  const float delta = (v - sk) * beta;

  // S_j += k · δ_j (ggml_vec_mad_f32), and dot(S_j, q).
  const F::V vdelta = F::set1(delta);
  a0 = F::zero();
  a1 = F::zero();
  a2 = F::zero();
  a3 = F::zero();
  for (int64_t i = 0; i < np; i += 4 * L) {
    const F::V s0 = F::fma(F::load(k + i), vdelta, F::load(s + i));
    const F::V s1 = F::fma(F::load(k + i + L), vdelta, F::load(s + i + L));
    const F::V s2 = F::fma(F::load(k + i + 2 * L), vdelta, F::load(s + i + 2 * L));
    const F::V s3 = F::fma(F::load(k + i + 3 * L), vdelta, F::load(s + i + 3 * L));
    F::store(s + i, s0);
    F::store(s + i + L, s1);
    F::store(s + i + 2 * L, s2);
    F::store(s + i + 3 * L, s3);
    a0 = F::fma(s0, F::load(q + i), a0);
    a1 = F::fma(s1, F::load(q + i + L), a1);
    a2 = F::fma(s2, F::load(q + i + 2 * L), a2);
    a3 = F::fma(s3, F::load(q + i + 3 * L), a3);
  }
  float sq = reduce4(a0, a1, a2, a3);
  for (int64_t i = np; i < d; ++i) {
    s[i] += k[i] * delta;
    sq += s[i] * q[i];
  }
  *out = sq * scale;
}

inline void delta_rule(float* S, int64_t d, const float* q, const float* k, const float* v, float decay,
                       float beta, float scale, float* out) {
  const int64_t np = d & ~static_cast<int64_t>(4 * F32Vec::kLanes - 1);
  for (int64_t j = 0; j < d; ++j) delta_rule_row(S + j * d, d, np, q, k, v[j], decay, beta, scale, out + j);
}

}  // namespace df::kernels::detail::DF_X86_LEVEL

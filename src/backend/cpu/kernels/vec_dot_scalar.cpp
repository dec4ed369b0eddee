// The scalar level: the references of quant/ behind the kernel signatures, so that every level offers the
// same table and the scalar one can be selected (DF_SIMD=scalar) to check the others end to end.
#include <cmath>

#include "backend/cpu/kernels/level_table.h"
#include "quant/q4_0x16.h"
#include "quant/quant.h"

namespace df::kernels::detail {
namespace {

template <GgmlType W>
float dot(const void* w_row, const void* act_row, int64_t n) {
  return quant::vec_dot(W, w_row, act_row, n);
}

template <GgmlType W>
void gemm(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride, int64_t cols,
          int64_t n, float* out, size_t out_stride) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; ++r) {
      out[static_cast<size_t>(c) * out_stride + static_cast<size_t>(r)] = quant::vec_dot(
          W, wb + static_cast<size_t>(r) * w_stride, ab + static_cast<size_t>(c) * act_stride, n);
    }
  }
}

// Packed rows: each output through the reference dot of its row, read in place from its group.
void gemm_q4_0x16(const void* w, size_t w_stride, int64_t rows, const void* act, size_t act_stride,
                  int64_t cols, int64_t n, float* out, size_t out_stride) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(act);
  const size_t group_bytes = w_stride * quant::kQ4_0x16Rows;
  for (int64_t c = 0; c < cols; ++c) {
    const auto* a = reinterpret_cast<const quant::BlockQ8_0*>(ab + static_cast<size_t>(c) * act_stride);
    for (int64_t r = 0; r < rows; ++r) {
      out[static_cast<size_t>(c) * out_stride + static_cast<size_t>(r)] =
          quant::dot_q4_0x16_row(wb + static_cast<size_t>(r / quant::kQ4_0x16Rows) * group_bytes,
                                 static_cast<int>(r % quant::kQ4_0x16Rows), a, n / quant::QK4_0);
    }
  }
}

template <GgmlType W>
constexpr DotEntry entry() {
  return {&dot<W>, &gemm<W>};
}

// The gated delta rule's step (delta_rule.h) in the SIMD levels' order (x86_delta_rule.h: ggml's AVX helpers,
// four accumulators of 8 lanes with fused multiply-adds, GGML_F32x8_REDUCE, the remainder in plain float),
// one lane at a time, so that every level gives the same bits.
constexpr int kDeltaLanes = 8, kDeltaStep = 4 * kDeltaLanes;

float dot_f32_lanes(const float* x, const float* y, int64_t n) {
  const int64_t np = n & ~int64_t{kDeltaStep - 1};
  float acc[4][kDeltaLanes] = {};
  for (int64_t i = 0; i < np; i += kDeltaStep)
    for (int r = 0; r < 4; ++r)
      for (int l = 0; l < kDeltaLanes; ++l)
        acc[r][l] = std::fma(x[i + r * kDeltaLanes + l], y[i + r * kDeltaLanes + l], acc[r][l]);
  float a[kDeltaLanes];
  for (int l = 0; l < kDeltaLanes; ++l) a[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  float t0[4];
  for (int l = 0; l < 4; ++l) t0[l] = a[l] + a[l + 4];
  float sum = (t0[0] + t0[1]) + (t0[2] + t0[3]);
  for (int64_t i = np; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

void delta_rule(float* S, int64_t d, const float* q, const float* k, const float* v, float decay, float beta,
                float scale, float* out) {
  const int64_t np = d & ~int64_t{kDeltaStep - 1};
  for (int64_t j = 0; j < d; ++j) {
    float* s = S + j * d;
    for (int64_t i = 0; i < d; ++i) s[i] *= decay;
    const float delta = (v[j] - dot_f32_lanes(s, k, d)) * beta;
    for (int64_t i = 0; i < np; ++i) s[i] = std::fma(k[i], delta, s[i]);
    for (int64_t i = np; i < d; ++i) s[i] += k[i] * delta;
    out[j] = dot_f32_lanes(s, q, d) * scale;
  }
}

template <GgmlType A>
void quantize(const float* x, void* dst, int64_t n) {
  quant::quantize_activation(A, x, dst, n);
}

}  // namespace

const LevelTable& scalar_table() {
  static const LevelTable table = [] {
    LevelTable t;
    t.f32 = entry<GgmlType::F32>();
    t.f16 = entry<GgmlType::F16>();
    t.bf16 = entry<GgmlType::BF16>();
    t.q4_0 = entry<GgmlType::Q4_0>();
    t.q4_1 = entry<GgmlType::Q4_1>();
    t.q8_0 = entry<GgmlType::Q8_0>();
    t.q4_k = entry<GgmlType::Q4_K>();
    t.q5_k = entry<GgmlType::Q5_K>();
    t.q6_k = entry<GgmlType::Q6_K>();
    t.mxfp4 = entry<GgmlType::MXFP4>();
    t.q4_0x16 = &gemm_q4_0x16;
    t.quantize_f16 = &quantize<GgmlType::F16>;
    t.quantize_q8_0 = &quantize<GgmlType::Q8_0>;
    t.quantize_q8_1 = &quantize<GgmlType::Q8_1>;
    t.quantize_q8_k = &quantize<GgmlType::Q8_K>;
    t.delta_rule = &delta_rule;
    return t;
  }();
  return table;
}

}  // namespace df::kernels::detail

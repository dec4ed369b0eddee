// The scalar level: the references of quant/ behind the kernel signatures, so that every level offers the
// same table and the scalar one can be selected (DF_SIMD=scalar) to check the others end to end.
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
    return t;
  }();
  return table;
}

}  // namespace df::kernels::detail

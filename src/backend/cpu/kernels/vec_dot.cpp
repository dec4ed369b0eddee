// Dispatch: the table of the requested level, falling back to a lower level for a kernel it lacks.
#include "backend/cpu/kernels/vec_dot.h"

#include <array>

#include "backend/cpu/kernels/delta_rule.h"
#include "backend/cpu/kernels/level_table.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::kernels {
namespace {

using detail::DotEntry;
using detail::LevelTable;

constexpr std::array<GgmlType, 10> kWeightTypes = {
    GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
    GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4};

const LevelTable& table_of(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx2:
      return detail::avx2_table();
    case SimdLevel::kAvx512:
      return detail::avx512_table();
    case SimdLevel::kScalar:
      break;
  }
  return detail::scalar_table();
}

const DotEntry* entry_of(const LevelTable& t, GgmlType w) {
  switch (w) {
    case GgmlType::F32:
      return &t.f32;
    case GgmlType::F16:
      return &t.f16;
    case GgmlType::BF16:
      return &t.bf16;
    case GgmlType::Q4_0:
      return &t.q4_0;
    case GgmlType::Q4_1:
      return &t.q4_1;
    case GgmlType::Q8_0:
      return &t.q8_0;
    case GgmlType::Q4_K:
      return &t.q4_k;
    case GgmlType::Q5_K:
      return &t.q5_k;
    case GgmlType::Q6_K:
      return &t.q6_k;
    case GgmlType::MXFP4:
      return &t.mxfp4;
    default:
      return nullptr;
  }
}

QuantizeFn quantizer_of(const LevelTable& t, GgmlType act) {
  switch (act) {
    case GgmlType::F16:
      return t.quantize_f16;
    case GgmlType::Q8_0:
      return t.quantize_q8_0;
    case GgmlType::Q8_1:
      return t.quantize_q8_1;
    case GgmlType::Q8_K:
      return t.quantize_q8_k;
    default:
      return nullptr;
  }
}

SimdLevel lower(SimdLevel level) {
  return level == SimdLevel::kAvx512 ? SimdLevel::kAvx2 : SimdLevel::kScalar;
}

void require_supported(SimdLevel level) {
  if (!simd_level_supported(level))
    fail("SIMD level {} is not supported by this CPU (or its OS); the best it supports is {}",
         simd_level_name(level), simd_level_name(best_simd_level()));
}

// One resolved VecDotKernels per (type, level), built on first use. Only the levels this machine supports
// are touched: even reading the table of another level would run code compiled for it.
struct Resolved {
  std::array<std::array<VecDotKernels, kWeightTypes.size()>, 3> kernels{};

  Resolved() {
    for (SimdLevel level : kAllSimdLevels) {
      if (!simd_level_supported(level)) continue;
      for (size_t i = 0; i < kWeightTypes.size(); ++i) {
        const GgmlType w = kWeightTypes[i];
        SimdLevel from = level;
        const DotEntry* e = entry_of(table_of(from), w);
        while (e->dot == nullptr || e->gemm == nullptr) {
          from = lower(from);
          e = entry_of(table_of(from), w);
        }
        VecDotKernels& k = kernels[static_cast<size_t>(level)][i];
        k = {w, quant::vec_dot_type(w), from, e->dot, e->gemm, nullptr, SimdLevel::kScalar};
        if (w == GgmlType::Q4_0) {
          for (k.packed_level = level; table_of(k.packed_level).q4_0x16 == nullptr;)
            k.packed_level = lower(k.packed_level);
          k.packed_gemm = table_of(k.packed_level).q4_0x16;
        }
      }
    }
  }
};

}  // namespace

const VecDotKernels& vec_dot_kernels(GgmlType w, SimdLevel level) {
  require_supported(level);
  static const Resolved resolved;
  for (size_t i = 0; i < kWeightTypes.size(); ++i) {
    if (kWeightTypes[i] == w) return resolved.kernels[static_cast<size_t>(level)][i];
  }
  fail(
      "no dot-product kernel for weight type {} (supported: F32 F16 BF16 Q4_0 Q4_1 Q8_0 Q4_K Q5_K Q6_K "
      "MXFP4)",
      ggml_type_name(w));
}

QuantizeFn activation_quantizer(GgmlType act, SimdLevel level) {
  require_supported(level);
  for (SimdLevel from = level;; from = lower(from)) {
    if (QuantizeFn q = quantizer_of(table_of(from), act)) return q;
    if (from == SimdLevel::kScalar) break;
  }
  switch (act) {
    case GgmlType::F32:
      return
          [](const float* x, void* dst, int64_t n) { quant::quantize_activation(GgmlType::F32, x, dst, n); };
    case GgmlType::BF16:
      return
          [](const float* x, void* dst, int64_t n) { quant::quantize_activation(GgmlType::BF16, x, dst, n); };
    default:
      fail("{} is not an activation format (F32 F16 BF16 Q8_0 Q8_1 Q8_K)", ggml_type_name(act));
  }
}

DeltaRuleFn delta_rule_kernel(SimdLevel level) {
  require_supported(level);
  for (SimdLevel from = level;; from = lower(from)) {
    if (DeltaRuleFn f = table_of(from).delta_rule) return f;
    if (from == SimdLevel::kScalar) break;
  }
  fail("no gated delta-rule kernel at SIMD level {}", simd_level_name(level));  // the scalar table has one
}

void check_row_length(GgmlType w, int64_t n) {
  const GgmlType act = quant::vec_dot_type(w);  // throws for a type without a dot product
  for (GgmlType t : {w, act}) {
    const int64_t block = ggml_traits(t).block_size;
    if (n < 0 || n % block != 0)
      fail("dot product of {} weights: a row of {} values is not a multiple of the {} block size {}",
           ggml_type_name(w), n, ggml_type_name(t), block);
  }
}

}  // namespace df::kernels

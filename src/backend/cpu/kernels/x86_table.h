#pragma once
// The table of one SIMD level: every x86 kernel, compiled for the level that includes this header.
#include "backend/cpu/kernels/x86_common.h"
#include "backend/cpu/kernels/x86_delta_rule.h"
#include "backend/cpu/kernels/x86_float.h"
#include "backend/cpu/kernels/x86_kquants.h"
#include "backend/cpu/kernels/x86_q4_0x16.h"
#include "backend/cpu/kernels/x86_q8_family.h"
#include "backend/cpu/kernels/x86_quantize.h"

namespace df::kernels::detail::DF_X86_LEVEL {

// Constant-initialized: reading the table runs no code of the level.
constexpr LevelTable make_table() {
  LevelTable t;
  t.f32 = entry<FloatKernel<F32Loader>>();
  t.f16 = entry<FloatKernel<F16Loader>>();
  t.bf16 = entry<FloatKernel<BF16Loader>>();
  t.q4_0 = entry<Q8Kernel<Q4_0Format>>();
  t.q4_1 = entry<Q8Kernel<Q4_1Format>>();
  t.q8_0 = entry<Q8Kernel<Q8_0Format>>();
  t.mxfp4 = entry<Q8Kernel<Mxfp4Format>>();
  t.q4_0x16 = &Q4_0x16Kernel::gemm;
  t.q4_k = entry<KQuantKernel<Q4KFormat>>();
  t.q5_k = entry<KQuantKernel<Q5KFormat>>();
  t.q6_k = entry<KQuantKernel<Q6KFormat>>();
  t.quantize_f16 = &quantize_f16_row;
  t.quantize_q8_0 = &quantize_q8_row<BlockQ8_0, GgmlType::Q8_0>;
  t.quantize_q8_1 = &quantize_q8_row<BlockQ8_1, GgmlType::Q8_1>;
  t.quantize_q8_k = &quantize_q8k_row;
  t.delta_rule = &delta_rule;
  return t;
}

inline constexpr LevelTable kTable = make_table();

}  // namespace df::kernels::detail::DF_X86_LEVEL

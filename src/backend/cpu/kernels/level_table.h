#pragma once
// Internal: what one SIMD level provides, as plain function pointers (nullptr where it has no kernel). Each
// level's table is defined in the translation unit compiled for that level; only vec_dot.cpp reads them,
// after checking that the CPU supports the level.
#include "backend/cpu/kernels/delta_rule.h"
#include "backend/cpu/kernels/vec_dot.h"

namespace df::kernels::detail {

struct DotEntry {
  DotFn dot = nullptr;
  GemmFn gemm = nullptr;
};

struct LevelTable {
  // Indexed by weight type.
  DotEntry f32, f16, bf16, q4_0, q4_1, q8_0, q4_k, q5_k, q6_k, mxfp4;
  // Q4_0 rows repacked as Q4_0x16 (quant/q4_0x16.h), against Q8_0.
  GemmFn q4_0x16 = nullptr;
  // Indexed by activation format.
  QuantizeFn quantize_f16 = nullptr, quantize_q8_0 = nullptr, quantize_q8_1 = nullptr,
             quantize_q8_k = nullptr;
  // The gated delta rule's per-token step (delta_rule.h).
  DeltaRuleFn delta_rule = nullptr;
};

const LevelTable& scalar_table();
const LevelTable& avx2_table();
const LevelTable& avx512_table();

}  // namespace df::kernels::detail

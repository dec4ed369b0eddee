#pragma once
// The inner step of the gated delta rule (qwen35moe's gated_delta_net, backend.h) for one head and one token,
// one implementation per SIMD level, chosen at run time like the dot products (vec_dot.h).
#include <cstdint>

#include "backend/cpu/kernels/cpu_features.h"

namespace df::kernels {

// One token on one head's state S: d rows of d floats, row j the value column j over the key dims (ggml's
// transposed layout). As ggml's fused gated_delta_net CPU op computes it (ggml-cpu ops.cpp, one gate value
// per head) with the vector helpers of the level:
//   S ← S · decay                          ggml_vec_scale_f32 over the d·d values
//   δ_j = (v_j − dot(S_j, k)) · beta        ggml_vec_dot_f32, row by row
//   S_j ← S_j + k · δ_j                     ggml_vec_mad_f32, row by row
//   out_j = dot(S_j, q) · scale             ggml_vec_dot_f32, row by row
// Each step reads and writes row j alone, so the kernels take the rows one at a time through all four steps:
// one pass over S instead of ggml's four, the same operations on the same values, the same bits.
// The helpers at each level, as ggml builds them:
// - scalar (ggml without GGML_SIMD): dot sums the float products in order in double, rounded to float at the
//   end; mad is y + x·v, two roundings;
// - avx2 (GGML_F32_STEP 32): dot keeps four 8-lane FMA accumulators over the first d & ~31 values, reduces
//   them as GGML_F32x8_REDUCE (acc0 + acc2, acc1 + acc3, their sum, the two 128-bit halves added, two
//   horizontal adds), then adds the rest in order in float; mad is one FMA per value over the first d & ~31,
//   y + x·v (two roundings) for the rest;
// - avx512 (GGML_F32_STEP 64): the same with four 16-lane accumulators, reduced as GGML_F32x16_REDUCE does
//   with GCC's _mm512_reduce_add_ps (256-bit halves, 128-bit halves, lanes {0,1} + {2,3}, then lane 0 + 1).
// The products scale (S · decay) and the final out_j · scale are single roundings at every level.
using DeltaRuleFn = void (*)(float* S, int64_t d, const float* q, const float* k, const float* v, float decay,
                             float beta, float scale, float* out);

// The kernel of a level (every level has one). Throws df::Error for a level this machine does not support.
DeltaRuleFn delta_rule_kernel(SimdLevel level);

}  // namespace df::kernels

// Construction and the elementwise ops.
#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/gemm_tiling.h"
#include "util/error.h"

namespace df::backend {

CpuBackend::CpuBackend(int n_threads) : CpuBackend(n_threads, kernels::select_simd_level()) {}

CpuBackend::CpuBackend(int n_threads, kernels::SimdLevel level) : pool_(n_threads), level_(level) {
  if (!kernels::simd_level_supported(level))
    fail("cpu backend: SIMD level {} is not supported by this CPU (the best it supports is {})",
         kernels::simd_level_name(level), kernels::simd_level_name(kernels::best_simd_level()));
}

void CpuBackend::swiglu(const float* gate, const float* up, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = detail::silu_mul(gate[i], up[i]);
}

void CpuBackend::add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void CpuBackend::add_bias_rows(float* x, const float* bias, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += bias[i];
}

quant::RowPacking CpuBackend::preferred_packing(GgmlType type, int64_t n_out) const {
  return quant::preferred_packing(type, n_out);
}

}  // namespace df::backend

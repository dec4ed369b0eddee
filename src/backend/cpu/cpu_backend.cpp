// Construction and the elementwise ops.
#include "backend/cpu/cpu_backend.h"

#include <cmath>

namespace df::backend {

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads) {}

void CpuBackend::swiglu(const float* gate, const float* up, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    y[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void CpuBackend::add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace df::backend

// RMS norm and NeoX RoPE with ggml's CPU numerics (ARCHITECTURES.md 1.2, 1.4).
#include <array>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "util/error.h"

namespace df::backend {

void CpuBackend::rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i] * xr[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    // Two roundings, as ggml's rms_norm then mul.
    if (weight) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * scale) * weight[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * scale;
    }
  }
}

void CpuBackend::rope_neox(float* x, int64_t rows, int n_head, int head_dim, int n_rot, const int32_t* pos,
                           float freq_base, float freq_scale) {
  constexpr int kMaxPairs = 512;
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > head_dim || n_rot / 2 > kMaxPairs)
    fail("rope: rotated dims {} must be even, positive and at most the head dim {} (and {})", n_rot, head_dim,
         2 * kMaxPairs);
  const int half = n_rot / 2;
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  std::array<float, kMaxPairs> cos_t{}, sin_t{};
  for (int64_t r = 0; r < rows; ++r) {
    // θ_i = p · theta_scale^i by repeated multiplication in float, as ggml's rope cache does.
    float theta = static_cast<float>(pos[r]);
    for (int i = 0; i < half; ++i) {
      const float t = freq_scale * theta;
      cos_t[static_cast<size_t>(i)] = std::cos(t);
      sin_t[static_cast<size_t>(i)] = std::sin(t);
      theta *= theta_scale;
    }
    for (int h = 0; h < n_head; ++h) {
      float* v = x + (r * n_head + h) * static_cast<int64_t>(head_dim);
      for (int i = 0; i < half; ++i) {
        const float c = cos_t[static_cast<size_t>(i)], s = sin_t[static_cast<size_t>(i)];
        const float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
      }
    }
  }
}

}  // namespace df::backend

// RMS norm and RoPE (NeoX and normal, YaRN, frequency factors) with ggml's CPU numerics (ARCHITECTURES.md
// 1.2, 1.4).
#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tiling.h"
#include "util/error.h"

namespace df::backend {
namespace {

// Values of RMS norm below which the call stays on the calling thread (a few rows of a prefill chunk).
constexpr int64_t kMinParallelNormValues = int64_t{1} << 14;

}  // namespace

void CpuBackend::rms_norm(Buf<const float> x_buf, int64_t rows, int64_t n, Buf<const float> weight_buf,
                          float eps, Buf<float> y_buf) {
  const auto timer = timed({"rms_norm", nullptr, 0, 0, rows});
  const float* x = detail::raw(x_buf.first(static_cast<size_t>(rows * n)));
  float* y = detail::raw(y_buf.first(static_cast<size_t>(rows * n)));
  const float* weight = weight_buf ? detail::raw(weight_buf.first(static_cast<size_t>(n))) : nullptr;
  // Rows in parallel; a row's sum stays one sequential double accumulation, ggml's order.
  pool_.parallel_for(rows, std::max<int64_t>(1, kMinParallelNormValues / std::max<int64_t>(n, 1)),
                     [&](int64_t r0, int64_t r1) {
                       for (int64_t r = r0; r < r1; ++r) {
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
                     });
}

namespace {

// The dimension index at which a rotation of n_dims dims completes `beta` turns over n_ctx_orig positions.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float beta, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (beta * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(base));
}

constexpr int kMaxPairs = 512;  // head sizes up to 1024
// Rows of RoPE below which the call stays on the calling thread.
constexpr int64_t kMinParallelRopeValues = 1 << 14;

}  // namespace

// ggml's rope_ext (ggml-cpu ops.cpp rope_yarn): per pair i the extrapolated angle θ = p · s^i (s = base^(-2 /
// n_rot), float recurrence, / freq_factors[i]), the interpolated one freq_scale · θ, mixed by the YaRN ramp;
// cos and sin times the magnitude. Without YaRN (ext_factor 0) and attn_factor 1 this is the plain RoPE
// exactly (the magnitude multiplies by 1.0f).
void CpuBackend::rope(Buf<float> x_buf, int64_t rows, int n_head, int head_dim, Buf<const int32_t> pos_buf,
                      const RopeParams& p) {
  const auto timer = timed({"rope"});
  const int n = p.n_rot, half = n / 2;
  float* x = detail::raw(x_buf.first(static_cast<size_t>(rows * n_head * head_dim)));
  const int32_t* pos = detail::raw(pos_buf.first(static_cast<size_t>(rows)));
  const float* freq_factors =
      p.freq_factors ? detail::raw(p.freq_factors.first(static_cast<size_t>(n / 2))) : nullptr;
  if (n <= 0 || n % 2 != 0 || n > head_dim || half > kMaxPairs)
    fail("rope: rotated dims {} must be even, positive and at most the head dim {} (and {})", n, head_dim,
         2 * kMaxPairs);
  if (p.ext_factor != 0.0f && p.n_ctx_orig <= 0)
    fail("rope: YaRN needs the original context length (got {})", p.n_ctx_orig);
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(n));
  float corr_lo = 0, corr_hi = 0;
  if (p.ext_factor != 0.0f) {
    corr_lo = std::max(0.0f, std::floor(yarn_corr_dim(n, p.n_ctx_orig, p.beta_fast, p.freq_base)));
    corr_hi = std::min(static_cast<float>(n - 1),
                       std::ceil(yarn_corr_dim(n, p.n_ctx_orig, p.beta_slow, p.freq_base)));
  }
  const int64_t grain =
      std::max<int64_t>(1, kMinParallelRopeValues / (static_cast<int64_t>(n_head) * head_dim));
  pool_.parallel_for(rows, grain, [&](int64_t r_begin, int64_t r_end) {
    std::array<float, kMaxPairs> cos_t{}, sin_t{};
    for (int64_t r = r_begin; r < r_end; ++r) {
      float theta_extrap = static_cast<float>(pos[r]);
      for (int i = 0; i < half; ++i) {
        const float base = freq_factors ? theta_extrap / freq_factors[i] : theta_extrap;
        const float theta_interp = p.freq_scale * base;
        float theta = theta_interp, m = p.attn_factor;
        if (p.ext_factor != 0.0f) {
          const float y = (static_cast<float>(i) - corr_lo) / std::max(0.001f, corr_hi - corr_lo);
          const float ramp_mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
          theta = theta_interp * (1.0f - ramp_mix) + base * ramp_mix;
          m *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
        }
        cos_t[static_cast<size_t>(i)] = std::cos(theta) * m;
        sin_t[static_cast<size_t>(i)] = std::sin(theta) * m;
        theta_extrap *= theta_scale;
      }
      for (int h = 0; h < n_head; ++h) {
        float* v = x + (r * n_head + h) * static_cast<int64_t>(head_dim);
        for (int i = 0; i < half; ++i) {
          const float c = cos_t[static_cast<size_t>(i)], s = sin_t[static_cast<size_t>(i)];
          const int i0 = p.mode == RopeMode::NeoX ? i : 2 * i,
                    i1 = p.mode == RopeMode::NeoX ? i + half : 2 * i + 1;
          const float x0 = v[i0], x1 = v[i1];
          v[i0] = x0 * c - x1 * s;
          v[i1] = x0 * s + x1 * c;
        }
      }
    }
  });
}

void CpuBackend::norm_rope(std::span<const NormRopeTask> tasks, int64_t rows, int head_dim, float eps,
                           Buf<const int32_t> pos, const RopeParams& p) {
  for (const NormRopeTask& t : tasks) {
    rms_norm(t.x, rows * t.n_head, head_dim, t.weight, eps, t.x);
    rope(t.x, rows, t.n_head, head_dim, pos, p);
  }
}

}  // namespace df::backend

// qwen35moe's gated delta-net ops (ARCHITECTURES.md 5.4) as llama.cpp's CPU computes them: ggml_ssm_conv and
// ggml_silu for the conv, ggml_l2_norm for q and k, the sigmoid / softplus gates, and the fused
// ggml_gated_delta_net op, token by token, the state held transposed (row j = value column j).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tiling.h"
#include "util/error.h"

namespace df::backend {
namespace {

constexpr int kMaxConvTaps = 64;
constexpr int64_t kMaxHeadDim = 512;  // per-head vectors live on the stack: no allocation per call

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

// x / max(sqrt(Σx²), eps), the sum in double and the square root in float (ggml_l2_norm).
void l2_normalize(const float* x, int64_t n, float eps, float* y) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float scale = 1.0f / std::fmax(std::sqrt(static_cast<float>(sum)), eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void CpuBackend::delta_net_conv(Buf<const float> u_buf, int64_t rows, int64_t channels,
                                Buf<const float> conv_w_buf, int taps, Buf<float> state_buf,
                                Buf<float> y_buf) {
  if (taps < 2 || taps > kMaxConvTaps)
    fail("delta-net conv: {} taps is out of range (2..{})", taps, kMaxConvTaps);
  const int hist_len = taps - 1;
  const float* u = detail::raw(u_buf.first(static_cast<size_t>(rows * channels)));
  const float* w_all = detail::raw(conv_w_buf.first(static_cast<size_t>(channels * taps)));
  float* state = detail::raw(state_buf.first(static_cast<size_t>(hist_len * channels)));
  float* y = detail::raw(y_buf.first(static_cast<size_t>(rows * channels)));
  constexpr int64_t kGrain = 256;
  pool_.parallel_for(channels, kGrain, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float hist[kMaxConvTaps];  // this channel's previous raw inputs, oldest first
      for (int j = 0; j < hist_len; ++j) hist[j] = state[j * channels + c];
      const float* w = w_all + c * taps;
      for (int64_t t = 0; t < rows; ++t) {
        const float x = u[t * channels + c];
        float sum = 0.0f;
        for (int j = 0; j < hist_len; ++j) sum += hist[j] * w[j];
        sum += x * w[hist_len];
        y[t * channels + c] = silu(sum);
        for (int j = 0; j + 1 < hist_len; ++j) hist[j] = hist[j + 1];
        hist[hist_len - 1] = x;
      }
      for (int j = 0; j < hist_len; ++j) state[j * channels + c] = hist[j];
    }
  });
}

void CpuBackend::gated_delta_net(const DeltaNetParams& p, Buf<const float> qkv_buf,
                                 Buf<const float> alpha_buf, Buf<const float> beta_buf, int64_t rows,
                                 Buf<float> state_buf, Buf<float> out_buf) {
  const int64_t nk = p.n_k_heads, nv = p.n_v_heads, d = p.head_dim;
  if (d < 1 || d > kMaxHeadDim) fail("gated delta-net: head size {} is out of range (1..{})", d, kMaxHeadDim);
  if (nk < 1 || nv < 1 || nv % nk != 0)
    fail(
        "gated delta-net: {} value heads over {} key heads of {} values: value heads must be a positive "
        "multiple of key heads",
        nv, nk, d);
  const int64_t C = 2 * nk * d + nv * d;
  const float* qkv = detail::raw(qkv_buf.first(static_cast<size_t>(rows * C)));
  const float* alpha = detail::raw(alpha_buf.first(static_cast<size_t>(rows * nv)));
  const float* beta = detail::raw(beta_buf.first(static_cast<size_t>(rows * nv)));
  const float* dt_bias = detail::raw(p.dt_bias.first(static_cast<size_t>(nv)));
  const float* ssm_a = detail::raw(p.ssm_a.first(static_cast<size_t>(nv)));
  float* state = detail::raw(state_buf.first(static_cast<size_t>(nv * d * d)));
  float* out = detail::raw(out_buf.first(static_cast<size_t>(rows * nv * d)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // One task per value head: its matrix and its output columns are its own.
  pool_.run_tasks(nv, [&](int, int64_t h) {
    const int64_t kh = h % nk;
    float* S = state + h * d * d;  // S[j * d + i] = S_h[i][j]
    float q[kMaxHeadDim], k[kMaxHeadDim], delta[kMaxHeadDim];
    for (int64_t t = 0; t < rows; ++t) {
      const float* row = qkv + t * C;
      l2_normalize(row + kh * d, d, p.eps, q);
      l2_normalize(row + nk * d + kh * d, d, p.eps, k);
      const float* v = row + 2 * nk * d + h * d;
      const float b = sigmoid(beta[t * nv + h]);
      const float g = softplus(alpha[t * nv + h] + dt_bias[h]) * ssm_a[h];
      const float decay = std::exp(g);
      for (int64_t i = 0; i < d * d; ++i) S[i] *= decay;
      for (int64_t j = 0; j < d; ++j) delta[j] = (v[j] - dot(S + j * d, k, d)) * b;
      for (int64_t j = 0; j < d; ++j) {
        float* Sj = S + j * d;
        const float dj = delta[j];
        for (int64_t i = 0; i < d; ++i) Sj[i] += k[i] * dj;
      }
      float* o = out + (t * nv + h) * d;
      for (int64_t j = 0; j < d; ++j) o[j] = dot(S + j * d, q, d) * scale;
    }
  });
}

void CpuBackend::mul_sigmoid(Buf<float> x_buf, Buf<const float> gate_buf, int64_t rows, int64_t n,
                             int64_t gate_n) {
  if (gate_n != 1 && gate_n != n) fail("mul_sigmoid: a gate of {} values per row of {}", gate_n, n);
  float* x = detail::raw(x_buf.first(static_cast<size_t>(rows * n)));
  const float* gate = detail::raw(gate_buf.first(static_cast<size_t>(rows * gate_n)));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] *= sigmoid(gate[r * gate_n + (gate_n == 1 ? 0 : i)]);
}

}  // namespace df::backend

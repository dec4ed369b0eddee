// qwen35moe's gated delta-net ops (ARCHITECTURES.md 5.4) as llama.cpp's CPU computes them: ggml_ssm_conv and
// ggml_silu for the conv, ggml_l2_norm for q and k, the sigmoid / softplus gates, and the fused
// ggml_gated_delta_net op, token by token, the state held transposed (row j = value column j), its inner
// step the SIMD kernel of the backend's level (kernels/delta_rule.h). Nothing is allocated per call: per-head
// vectors and the conv's tap pointers live on the stack, bounded by kMaxHeadDim and kMaxConvTaps.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tiling.h"
#include "backend/cpu/kernels/delta_rule.h"
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

}  // namespace

// Tasks own whole cache lines of y and of the state (16 channels), and each does at least kConvTaskWork
// channel-rows (a conv, an expf and a division each) so that the pool's hand-off stays small beside it.
// Within a task, token by token over its channels: y rows and u rows are read and written contiguously, each
// tap read from the row of state or u it falls on (no history copied). Each sum is the same tap-order float
// sum whatever the split, so results depend neither on the thread count nor on how rows are batched.
void CpuBackend::delta_net_conv(Buf<const float> u_buf, int64_t rows, int64_t channels,
                                Buf<const float> conv_w_buf, int taps, Buf<float> state_buf,
                                Buf<float> y_buf) {
  const auto timer = timed({"delta_net_conv", nullptr, 0, 0, rows});
  if (taps < 2 || taps > kMaxConvTaps)
    fail("delta-net conv: {} taps is out of range (2..{})", taps, kMaxConvTaps);
  const int64_t hist_len = taps - 1;
  const float* u = detail::raw(u_buf.first(static_cast<size_t>(rows * channels)));
  const float* w_all = detail::raw(conv_w_buf.first(static_cast<size_t>(channels * taps)));
  float* state = detail::raw(state_buf.first(static_cast<size_t>(hist_len * channels)));
  float* y = detail::raw(y_buf.first(static_cast<size_t>(rows * channels)));
  if (rows <= 0 || channels <= 0) return;
  constexpr int64_t kLine = 16;
  constexpr int64_t kConvTaskWork = 1024;
  const int64_t groups = (channels + kLine - 1) / kLine;
  const int64_t grain = std::max<int64_t>(1, kConvTaskWork / (kLine * rows));
  pool_.parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    const int64_t c0 = g0 * kLine, c1 = std::min(channels, g1 * kLine);
    // Row m of the sequence (state rows, then u rows): m < hist_len is state row m, else u row m - hist_len.
    auto seq_row = [&](int64_t m) {
      return m < hist_len ? state + m * channels : u + (m - hist_len) * channels;
    };
    for (int64_t t = 0; t < rows; ++t) {
      const float* tap[kMaxConvTaps];  // tap j of token t: sequence row t + j
      for (int64_t j = 0; j < taps; ++j) tap[j] = seq_row(t + j);
      float* yt = y + t * channels;
      for (int64_t c = c0; c < c1; ++c) {
        const float* w = w_all + c * taps;
        float sum = 0.0f;
        for (int64_t j = 0; j < taps; ++j) sum += tap[j][c] * w[j];
        yt[c] = silu(sum);
      }
    }
    // The new state: sequence rows rows .. rows + hist_len - 1. Row j reads sequence row rows + j > j, a
    // state row not yet overwritten or a u row.
    for (int64_t j = 0; j < hist_len; ++j)
      std::memcpy(state + j * channels + c0, seq_row(rows + j) + c0,
                  static_cast<size_t>(c1 - c0) * sizeof(float));
  });
}

void CpuBackend::gated_delta_net(const DeltaNetParams& p, Buf<const float> qkv_buf,
                                 Buf<const float> alpha_buf, Buf<const float> beta_buf, int64_t rows,
                                 Buf<float> state_buf, Buf<float> out_buf) {
  const auto timer = timed({"gated_delta_net", nullptr, 0, 0, rows});
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
  const kernels::DeltaRuleFn step = kernels::delta_rule_kernel(level_);
  // One task per value head: its matrix and its output columns are its own; its tokens in order.
  pool_.run_tasks(nv, [&](int, int64_t h) {
    const int64_t kh = h % nk;
    float* S = state + h * d * d;  // S[j * d + i] = S_h[i][j]
    float q[kMaxHeadDim], k[kMaxHeadDim];
    for (int64_t t = 0; t < rows; ++t) {
      const float* row = qkv + t * C;
      l2_normalize(row + kh * d, d, p.eps, q);
      l2_normalize(row + nk * d + kh * d, d, p.eps, k);
      const float b = sigmoid(beta[t * nv + h]);
      const float g = softplus(alpha[t * nv + h] + dt_bias[h]) * ssm_a[h];
      step(S, d, q, k, row + 2 * nk * d + h * d, std::exp(g), b, scale, out + (t * nv + h) * d);
    }
  });
}

void CpuBackend::mul_sigmoid(Buf<float> x_buf, Buf<const float> gate_buf, int64_t rows, int64_t n,
                             int64_t gate_n) {
  const auto timer = timed({"mul_sigmoid"});
  if (gate_n != 1 && gate_n != n) fail("mul_sigmoid: a gate of {} values per row of {}", gate_n, n);
  float* x = detail::raw(x_buf.first(static_cast<size_t>(rows * n)));
  const float* gate = detail::raw(gate_buf.first(static_cast<size_t>(rows * gate_n)));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] *= sigmoid(gate[r * gate_n + (gate_n == 1 ? 0 : i)]);
}

}  // namespace df::backend

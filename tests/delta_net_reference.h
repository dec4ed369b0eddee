#pragma once
// The gated delta rule (Backend::gated_delta_net) in its chunked form, scalar, as llama.cpp's
// build_delta_net_chunking computes it for prefill: the same recurrence re-associated so that a run of
// tokens costs one state update per chunk. The tests hold a backend's chunked path (and this reference) to
// the sequential op within float rounding. Also: inputs in a trained model's ranges for those tests.
//
// Within a chunk of n tokens, with normalised q_r, k_r, β_r = sigmoid(beta_r), g_r the log decay and
// G_r = g_0 + … + g_r (its cumulative sum), and S the state entering the chunk (S[i][j]: key dim i, value
// column j), the sequential rule unrolls to
//   δ_r = β_r (v_r − e^{G_r} Sᵀk_r − Σ_{s<r} e^{G_r−G_s} (k_r·k_s) δ_s)
// i.e. (I + A) δ = β ⊙ (V − e^G ⊙ K S) with A[r][s] = β_r e^{G_r−G_s} (k_r·k_s) for s < r: a unit lower
// triangular system. llama.cpp solves it once per chunk for T = (I + A)⁻¹ (forward substitution), then
//   U = T (β ⊙ V),  W = T (β e^G ⊙ K),  δ = U − W S,
//   out_r = (e^{G_r} Sᵀq_r + Σ_{s≤r} e^{G_r−G_s} (q_r·k_s) δ_s) / sqrt(d),
//   S ← e^{G_{n−1}} S + Σ_s e^{G_{n−1}−G_s} k_s δ_sᵀ.
// Every exponent is a sum of log decays (g <= 0), so none overflows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace df::test {

struct DeltaNetShape {
  int n_k = 0, n_v = 0, head_dim = 0;
  float eps = 1e-6f;
};

// The layouts of Backend::gated_delta_net: qkv rows × (2 n_k + n_v) d (q heads, k heads, v heads), alpha and
// beta rows × n_v, state n_v matrices of d × d (matrix h row j = value column j over the key dims), out
// rows × n_v × d. `chunk` tokens per chunk (llama.cpp: 64).
inline void gated_delta_net_chunked(const DeltaNetShape& p, const float* dt_bias, const float* ssm_a,
                                    const float* qkv, const float* alpha, const float* beta, int64_t rows,
                                    float* state, float* out, int chunk = 64) {
  const int64_t nk = p.n_k, nv = p.n_v, d = p.head_dim, C = (2 * nk + nv) * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto dot = [d](const float* a, const float* b) {
    float s = 0.0f;
    for (int64_t i = 0; i < d; ++i) s += a[i] * b[i];
    return s;
  };
  // ggml_l2_norm: the sum in double, the square root in float.
  const auto normalized = [&](const float* x, float* y) {
    double sum = 0.0;
    for (int64_t i = 0; i < d; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float s = 1.0f / std::fmax(std::sqrt(static_cast<float>(sum)), p.eps);
    for (int64_t i = 0; i < d; ++i) y[i] = x[i] * s;
  };
  const size_t cd = static_cast<size_t>(chunk * d), cc = static_cast<size_t>(chunk * chunk);
  std::vector<float> q(cd), k(cd), v(cd), u(cd), w(cd), delta(cd), b(chunk), G(chunk), decay_to_end(chunk);
  std::vector<float> A(cc), T(cc), P(cc);
  for (int64_t h = 0; h < nv; ++h) {
    const int64_t kh = h % nk;
    float* S = state + h * d * d;  // S[j * d + i] = S_h[i][j]
    for (int64_t t0 = 0; t0 < rows; t0 += chunk) {
      const int64_t n = std::min<int64_t>(chunk, rows - t0);
      float cum = 0.0f;
      for (int64_t r = 0; r < n; ++r) {
        const float* row = qkv + (t0 + r) * C;
        normalized(row + kh * d, &q[r * d]);
        normalized(row + (nk + kh) * d, &k[r * d]);
        std::copy_n(row + (2 * nk + h) * d, d, &v[r * d]);
        b[r] = 1.0f / (1.0f + std::exp(-beta[(t0 + r) * nv + h]));
        const float x = alpha[(t0 + r) * nv + h] + dt_bias[h];
        cum += (x > 20.0f ? x : std::log(1.0f + std::exp(x))) * ssm_a[h];
        G[r] = cum;
      }
      // T = (I + A)⁻¹, row by row: T_r = e_r − Σ_{s<r} A[r][s] T_s.
      for (int64_t r = 0; r < n; ++r)
        for (int64_t s = 0; s < r; ++s)
          A[r * chunk + s] = b[r] * std::exp(G[r] - G[s]) * dot(&k[r * d], &k[s * d]);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c <= r; ++c) {
          float t = r == c ? 1.0f : 0.0f;
          for (int64_t s = c; s < r; ++s) t -= A[r * chunk + s] * T[s * chunk + c];
          T[r * chunk + c] = t;
        }
      // U = T (β ⊙ V), W = T (β e^G ⊙ K), then δ = U − W S.
      for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < d; ++i) {
          float su = 0.0f, sw = 0.0f;
          for (int64_t s = 0; s <= r; ++s) {
            su += T[r * chunk + s] * (b[s] * v[s * d + i]);
            sw += T[r * chunk + s] * (b[s] * std::exp(G[s]) * k[s * d + i]);  // (β e^G ⊙ K)[s][i]
          }
          u[r * d + i] = su;
          w[r * d + i] = sw;
        }
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < d; ++j) delta[r * d + j] = u[r * d + j] - dot(&w[r * d], S + j * d);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t s = 0; s <= r; ++s) P[r * chunk + s] = std::exp(G[r] - G[s]) * dot(&q[r * d], &k[s * d]);
      for (int64_t r = 0; r < n; ++r) {
        float* o = out + ((t0 + r) * nv + h) * d;
        for (int64_t j = 0; j < d; ++j) {
          float intra = 0.0f;
          for (int64_t s = 0; s <= r; ++s) intra += P[r * chunk + s] * delta[s * d + j];
          o[j] = (std::exp(G[r]) * dot(&q[r * d], S + j * d) + intra) * scale;
        }
      }
      const float last = G[n - 1];
      for (int64_t s = 0; s < n; ++s) decay_to_end[s] = std::exp(last - G[s]);
      for (int64_t j = 0; j < d; ++j)
        for (int64_t i = 0; i < d; ++i) {
          float add = 0.0f;
          for (int64_t s = 0; s < n; ++s) add += decay_to_end[s] * k[s * d + i] * delta[s * d + j];
          S[j * d + i] = std::exp(last) * S[j * d + i] + add;
        }
    }
  }
}

struct DeltaNetInputs {
  std::vector<float> qkv, alpha, beta, dt_bias, ssm_a, state;
};

// Inputs in the ranges of a trained model: q, k and v as the conv's SiLU gives them, ssm_a = −exp(A_log) in
// [−16, −1], dt_bias around log(0.001..0.1), so that the per-token decay e^g is mostly 0.8..0.999; the state
// one a few hundred tokens would leave. alpha_shift moves every alpha (a large one: decays near 0).
inline DeltaNetInputs delta_net_inputs(const DeltaNetShape& p, int64_t rows, uint32_t seed,
                                       float alpha_shift = 0.0f) {
  const auto n = [](int64_t count) { return static_cast<size_t>(count); };
  const auto normal = [](size_t count, uint32_t s, float sd) {
    std::mt19937 rng(s);
    std::normal_distribution<float> dist(0.0f, sd);
    std::vector<float> v(count);
    for (auto& x : v) x = dist(rng);
    return v;
  };
  const auto uniform = [](size_t count, uint32_t s, float lo, float hi) {
    std::mt19937 rng(s);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(count);
    for (auto& x : v) x = dist(rng);
    return v;
  };
  const int64_t nk = p.n_k, nv = p.n_v, d = p.head_dim;
  DeltaNetInputs in;
  in.qkv = normal(n(rows * (2 * nk + nv) * d), seed, 1.0f);
  for (float& x : in.qkv) x = x / (1.0f + std::exp(-x));
  in.alpha = normal(n(rows * nv), seed + 1, 1.0f);
  for (float& x : in.alpha) x += alpha_shift;
  in.beta = normal(n(rows * nv), seed + 2, 2.0f);
  in.dt_bias = uniform(n(nv), seed + 3, -7.0f, -2.3f);
  in.ssm_a = uniform(n(nv), seed + 4, -16.0f, -1.0f);
  in.state = normal(n(nv * d * d), seed + 5, 0.3f);
  return in;
}

}  // namespace df::test

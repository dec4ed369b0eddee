// gpt-oss ops missing from backend.h (see gpt_oss_ops.h), with ggml's CPU numerics: float RoPE angles by
// the iterative recurrence, f16 K·Q and P·V products summed as quant::vec_dot does for F16, softmax exp in
// float and sums in double.
#include "models/gpt_oss_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "quant/quant.h"
#include "util/error.h"

namespace df::models::gpt_oss {
namespace {

// The dimension index at which a rotation of `n_rot` turns completes `beta` turns over n_ctx_orig positions.
float yarn_corr_dim(int n_dims, int n_ctx_orig, float beta, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (beta * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(base));
}

float mscale(float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f; }

}  // namespace

float yarn_attn_factor(float freq_scale, float yarn_log_mul, float rope_attn_factor) {
  const float factor = 1.0f / freq_scale;
  float a = yarn_log_mul != 0.0f ? mscale(factor, 1.0f) / mscale(factor, yarn_log_mul) : mscale(factor, 1.0f);
  // ggml multiplies its own (1 + 0.1 ln factor) back in; llama.cpp divides it out first.
  a *= 1.0f / (1.0f + 0.1f * std::log(factor));
  return a * rope_attn_factor;
}

void rope_neox_yarn(float* x, int64_t rows, int n_head, int head_dim, const int32_t* pos,
                    const RopeParams& p) {
  const int n = p.n_rot, half = n / 2;
  if (n <= 0 || n % 2 != 0 || n > head_dim)
    fail("rope: {} rotated dims must be even and at most the head size {}", n, head_dim);
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(n));
  float corr_lo = 0, corr_hi = 0;
  if (p.ext_factor != 0.0f) {
    corr_lo = std::max(0.0f, std::floor(yarn_corr_dim(n, p.n_ctx_orig, p.beta_fast, p.freq_base)));
    corr_hi = std::min(static_cast<float>(n - 1),
                       std::ceil(yarn_corr_dim(n, p.n_ctx_orig, p.beta_slow, p.freq_base)));
  }
  // At most 512 rotated pairs (head sizes up to 1024).
  constexpr int kMaxPairs = 512;
  if (half > kMaxPairs) fail("rope: {} rotated dims exceed the supported {}", n, 2 * kMaxPairs);
  float cos_t[kMaxPairs], sin_t[kMaxPairs];
  for (int64_t r = 0; r < rows; ++r) {
    float theta_extrap = static_cast<float>(pos[r]);
    for (int i = 0; i < half; ++i) {
      const float theta_interp = p.freq_scale * theta_extrap;
      float theta = theta_interp, m = p.attn_factor;
      if (p.ext_factor != 0.0f) {
        const float y = (static_cast<float>(i) - corr_lo) / std::max(0.001f, corr_hi - corr_lo);
        const float ramp_mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
        theta = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
        m *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
      }
      cos_t[i] = std::cos(theta) * m;
      sin_t[i] = std::sin(theta) * m;
      theta_extrap *= theta_scale;
    }
    for (int h = 0; h < n_head; ++h) {
      float* v = x + (r * n_head + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos_t[i] - b * sin_t[i];
        v[i + half] = a * sin_t[i] + b * cos_t[i];
      }
    }
  }
}

size_t attention_scratch_floats(int n_ctx, int head_dim) {
  // scores, then f16 probabilities and the f16 query packed two per float
  return static_cast<size_t>(n_ctx) + static_cast<size_t>(n_ctx + 1) / 2 +
         static_cast<size_t>(head_dim + 1) / 2;
}

void attention_sinks(const backend::KvCacheView& kv, const float* q, int64_t rows, int pos0, int n_head,
                     float scale, const float* sinks, int window, float* out, std::span<float> scratch) {
  if (rows <= 0) return;
  if (pos0 < 0 || pos0 + rows > kv.n_ctx)
    fail("attention: positions {}..{} do not fit in a context of {}", pos0, pos0 + rows - 1, kv.n_ctx);
  if (kv.n_head_kv <= 0 || n_head % kv.n_head_kv != 0)
    fail("attention: {} query heads cannot share {} KV heads", n_head, kv.n_head_kv);
  if (scratch.size() < attention_scratch_floats(kv.n_ctx, kv.head_dim))
    fail("attention: scratch of {} floats, {} needed", scratch.size(),
         attention_scratch_floats(kv.n_ctx, kv.head_dim));
  const int hd = kv.head_dim, group = n_head / kv.n_head_kv;
  const int64_t k_row = static_cast<int64_t>(kv.n_head_kv) * hd;
  float* scores = scratch.data();
  auto* probs = reinterpret_cast<uint16_t*>(scores + kv.n_ctx);
  auto* q16 = probs + ((kv.n_ctx + 1) / 2) * 2;

  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = pos0 + r;
    const int64_t first = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
    const int64_t n_kv = p - first + 1;
    for (int h = 0; h < n_head; ++h) {
      const int kh = h / group;
      quant::quantize_activation(GgmlType::F16, q + (r * n_head + h) * hd, q16, hd);
      float max = sinks ? sinks[h] : -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n_kv; ++j) {
        const uint16_t* key = kv.k + (first + j) * k_row + static_cast<int64_t>(kh) * hd;
        scores[j] = quant::vec_dot(GgmlType::F16, key, q16, hd) * scale;
        max = std::max(max, scores[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n_kv; ++j) {
        const float e = std::exp(scores[j] - max);
        scores[j] = e;
        sum += static_cast<double>(e);
      }
      if (sinks) sum += static_cast<double>(std::exp(sinks[h] - max));
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < n_kv; ++j) scores[j] *= inv;
      quant::quantize_activation(GgmlType::F16, scores, probs, n_kv);
      float* o = out + (r * n_head + h) * hd;
      for (int d = 0; d < hd; ++d) {
        const uint16_t* vrow = kv.v + (static_cast<int64_t>(kh) * hd + d) * kv.n_ctx + first;
        o[d] = quant::vec_dot(GgmlType::F16, vrow, probs, n_kv);
      }
    }
  }
}

void add_bias_rows(float* x, const float* bias, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += bias[i];
}

void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::max(std::min(up[i], limit), -limit);
    y[i] = g / (1.0f + std::exp(alpha * -g)) * (u + 1.0f);
  }
}

void route_softmax_weight(const float* logits, int64_t rows, int n_expert, int k, int32_t* ids,
                          float* weights) {
  constexpr int kMaxExperts = 4096;
  if (n_expert <= 0 || n_expert > kMaxExperts || k <= 0 || k > n_expert)
    fail("router: cannot choose {} of {} experts (at most {})", k, n_expert, kMaxExperts);
  bool taken[kMaxExperts];
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * n_expert;
    int32_t* id = ids + r * k;
    float* w = weights + r * k;
    std::fill_n(taken, n_expert, false);
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < n_expert; ++e)
        if (!taken[e] && (best < 0 || l[e] > l[best])) best = e;
      taken[best] = true;
      id[j] = best;
      w[j] = l[best];
    }
    // The chosen logits are in descending order, so the first is the max.
    const float max = w[0];
    double sum = 0.0;
    for (int j = 0; j < k; ++j) {
      w[j] = std::exp(w[j] - max);
      sum += static_cast<double>(w[j]);
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < k; ++j) w[j] *= inv;
  }
}

}  // namespace df::models::gpt_oss

// Expert choice and weighting, as llama.cpp's build_moe_ffn: probabilities (sigmoid or softmax), top-k on
// probabilities + selection bias, weights from the unbiased probabilities, normalised by their sum (in
// double, clamped at 6.103515625e-5), optionally scaled; expert outputs combined in selection order.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tiling.h"
#include "util/error.h"

namespace df::backend {
namespace {

// moe_combine_add's task: this many columns of one row (whole cache lines of its k expert rows).
constexpr int64_t kCombineColumns = 256;

// SOFTMAX_WEIGHT (gpt-oss): the k largest raw logits in descending order (lowest id first on an exact tie),
// weights = softmax over those k logits (max subtracted, exp sum in double), neither renormalised nor
// scaled. No selection bias: gpt-oss's router bias is part of the logits (the model adds it, as llama.cpp's
// graph does).
void route_softmax_weight(const RouterParams& p, const float* logits, int64_t rows, int32_t* ids,
                          float* weights) {
  constexpr int kMaxExperts = 4096;
  std::array<bool, kMaxExperts> taken{};
  const int E = p.n_expert, k = p.k;
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * E;
    int32_t* id = ids + r * k;
    float* w = weights + r * k;
    std::fill_n(taken.begin(), E, false);
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e)
        if (!taken[static_cast<size_t>(e)] && (best < 0 || l[e] > l[best])) best = e;
      taken[static_cast<size_t>(best)] = true;
      id[j] = best;
      w[j] = l[best];
    }
    const float max = w[0];  // the chosen logits are in descending order
    double sum = 0.0;
    for (int j = 0; j < k; ++j) {
      w[j] = std::exp(w[j] - max);
      sum += static_cast<double>(w[j]);
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j < k; ++j) w[j] *= inv;
  }
}

}  // namespace

void CpuBackend::norm_route(const RouterParams& p, Buf<const float> x, int64_t rows, int64_t n,
                            Buf<const float> norm, float eps, const Weight& router, Buf<uint8_t> scratch,
                            Buf<float> xn, Buf<float> logits, Buf<int32_t> ids, Buf<float> weights) {
  rms_norm(x, rows, n, norm, eps, xn);
  matmul(router, xn, rows, logits, scratch);
  route(p, logits, rows, ids, weights);
}

void CpuBackend::route(const RouterParams& p, Buf<const float> logits_buf, int64_t rows, Buf<int32_t> ids_buf,
                       Buf<float> weights_buf) {
  const auto timer = timed({"route"});
  constexpr int kMaxExperts = 4096;
  if (p.n_expert <= 0 || p.n_expert > kMaxExperts || p.k <= 0 || p.k > p.n_expert)
    fail("router: cannot choose {} of {} experts (at most {})", p.k, p.n_expert, kMaxExperts);
  const float* logits = detail::raw(logits_buf.first(static_cast<size_t>(rows * p.n_expert)));
  int32_t* ids = detail::raw(ids_buf.first(static_cast<size_t>(rows * p.k)));
  float* weights = detail::raw(weights_buf.first(static_cast<size_t>(rows * p.k)));
  const float* selection_bias =
      p.selection_bias ? detail::raw(p.selection_bias.first(static_cast<size_t>(p.n_expert))) : nullptr;
  std::array<float, kMaxExperts> probs, score;
  const size_t E = static_cast<size_t>(p.n_expert);
  if (p.gating == Gating::SoftmaxWeight) {
    route_softmax_weight(p, logits, rows, ids, weights);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * p.n_expert;
    if (p.gating == Gating::Sigmoid) {
      for (size_t e = 0; e < E; ++e) probs[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
      float max = -std::numeric_limits<float>::infinity();
      for (size_t e = 0; e < E; ++e) max = std::max(max, l[e]);
      double sum = 0.0;
      for (size_t e = 0; e < E; ++e) {
        probs[e] = std::exp(l[e] - max);
        sum += static_cast<double>(probs[e]);
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (size_t e = 0; e < E; ++e) probs[e] *= inv;
    }
    for (size_t e = 0; e < E; ++e) score[e] = selection_bias ? probs[e] + selection_bias[e] : probs[e];

    int32_t* id = ids + r * p.k;
    float* w = weights + r * p.k;
    // k passes of a max search: descending score, the lowest id first on an exact tie.
    std::array<bool, kMaxExperts> taken{};
    for (int j = 0; j < p.k; ++j) {
      size_t best = E;
      for (size_t e = 0; e < E; ++e)
        if (!taken[e] && (best == E || score[e] > score[best])) best = e;
      taken[best] = true;
      id[j] = static_cast<int32_t>(best);
      w[j] = probs[best];
    }
    if (p.normalize) {
      double sum = 0.0;
      for (int j = 0; j < p.k; ++j) sum += static_cast<double>(w[j]);
      const float s = std::max(static_cast<float>(sum), 6.103515625e-5f);
      for (int j = 0; j < p.k; ++j) w[j] /= s;
    }
    if (p.scale != 0.0f && p.scale != 1.0f)
      for (int j = 0; j < p.k; ++j) w[j] *= p.scale;
  }
}

void CpuBackend::moe_combine_add(Buf<const float> expert_out_buf, Buf<const float> weights_buf, int64_t rows,
                                 int k, int64_t n, Buf<float> x_buf) {
  const auto timer = timed({"moe_combine_add"});
  const float* expert_out = detail::raw(expert_out_buf.first(static_cast<size_t>(rows * k * n)));
  const float* weights = detail::raw(weights_buf.first(static_cast<size_t>(rows * k)));
  float* x = detail::raw(x_buf.first(static_cast<size_t>(rows * n)));
  // Column chunks of every row as tasks: even one token's combine reads k rows that the ffn's tasks wrote
  // on every core, and pulling those cache lines over in parallel is most of its cost.
  const int64_t chunks = detail::ceil_div(n, kCombineColumns);
  pool_.parallel_for(rows * chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const int64_t r = c / chunks, i0 = c % chunks * kCombineColumns, i1 = std::min(n, i0 + kCombineColumns);
      const float* w = weights + r * k;
      const float* eo = expert_out + r * k * n;
      float* xr = x + r * n;
      for (int64_t i = i0; i < i1; ++i) {
        float o = eo[i] * w[0];
        for (int j = 1; j < k; ++j) o = o + eo[j * n + i] * w[j];
        xr[i] = xr[i] + o;
      }
    }
  });
}

}  // namespace df::backend

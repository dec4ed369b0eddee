// The gpt-oss ops that are not in the backend yet (models/gpt_oss_ops.h), against float64 references written
// from ARCHITECTURES.md 1.3-1.6 and 7.2, on random inputs and odd shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "models/gpt_oss_ops.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::models::gpt_oss {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// gpt-oss-20b's RoPE (ARCHITECTURES.md 7.2): d = 64, base 150000, YaRN factor 32 over 4096 positions. The
// correction band is pairs lo = floor(corr(32)) = 8 .. hi = ceil(corr(1)) = 18: pairs up to 8 keep the
// extrapolated angle, pairs from 18 on are fully interpolated (angle / 32), the ones between mix the two
// linearly, and every pair is scaled by m = 1 + 0.1 ln 32. The reference is float64 from the spec; the
// tolerance is what float arithmetic allows and no more: ggml's recurrence theta_i = pos * s^i in float
// rounds about 2i+1 times (2^-24 each, relative to the angle), plus ~1e-7 for float cos and sin.
TEST(GptOssOps, YarnRopeAnglesAndMagnitudeFollowTheSpec) {
  RopeParams p;
  p.n_rot = 64;
  p.freq_base = 150000.0f;
  p.freq_scale = 1.0f / 32.0f;
  p.ext_factor = 1.0f;
  p.n_ctx_orig = 4096;
  p.attn_factor = yarn_attn_factor(p.freq_scale, 0.0f, 1.0f);
  const double m = 1.0 + 0.1 * std::log(32.0);
  const int half = 32;
  auto corr_dim = [](double beta) {
    return 64.0 * std::log(4096.0 / (beta * 2.0 * std::numbers::pi)) / (2.0 * std::log(150000.0));
  };
  const double lo = std::floor(corr_dim(32.0)), hi = std::ceil(corr_dim(1.0));
  ASSERT_EQ(lo, 8.0);
  ASSERT_EQ(hi, 18.0);
  int band_pairs_checked = 0;
  for (int32_t pos : {1, 7, 1000, 4095}) {
    for (int i = 0; i < half; ++i) {
      std::vector<float> v(64, 0.0f);
      v[static_cast<size_t>(i)] = 1.0f;  // rotates into (cos, sin) · m
      rope_neox_yarn(v.data(), 1, 1, 64, &pos, p);
      const double c = v[static_cast<size_t>(i)], s = v[static_cast<size_t>(i + half)];
      EXPECT_NEAR(std::hypot(c, s), m, 1e-5) << "pair " << i;
      const double extrap = pos * std::pow(150000.0, -2.0 * i / 64.0);
      const double interp = extrap / 32.0;
      const double ramp = 1.0 - std::clamp((i - lo) / (hi - lo), 0.0, 1.0);  // 1 below the band, 0 above
      const double want = interp * (1.0 - ramp) + extrap * ramp;
      if (ramp > 0.0 && ramp < 1.0) ++band_pairs_checked;
      const double tol = m * ((2.0 * i + 3.0) * std::ldexp(1.0, -24) * extrap + 2e-7);
      // Compare the rotation, not the angle (which wraps): cos and sin of the expected angle.
      EXPECT_NEAR(c, std::cos(want) * m, tol) << "pos " << pos << " pair " << i << " angle " << want;
      EXPECT_NEAR(s, std::sin(want) * m, tol) << "pos " << pos << " pair " << i << " angle " << want;
    }
  }
  EXPECT_EQ(band_pairs_checked, 4 * 9);  // pairs 9..17 at each position
}

// Without scaling the YaRN RoPE is the plain NeoX RoPE of the backend, dims past n_rot untouched.
TEST(GptOssOps, UnscaledRopeEqualsTheBackendNeoxRope) {
  backend::CpuBackend be(1);
  const int n_head = 3, hd = 10, rows = 5;
  auto a = random_floats(static_cast<size_t>(rows * n_head * hd), 7);
  auto b = a;
  const auto orig = a;
  const int32_t pos[rows] = {0, 1, 5, 100, 4095};
  RopeParams p;
  p.n_rot = 6;
  p.freq_base = 10000.0f;
  rope_neox_yarn(a.data(), rows, n_head, hd, pos, p);
  be.rope_neox(b.data(), rows, n_head, hd, 6, pos, 10000.0f, 1.0f);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-5f) << i;
    if (i % hd >= 6) {
      EXPECT_EQ(a[i], orig[i]);
    }
  }
  EXPECT_THROW(rope_neox_yarn(a.data(), 1, 1, hd, pos, RopeParams{.n_rot = 12}), Error);
}

// A cache of n_ctx positions filled with f16 keys and values; positions listed in `poison` hold NaN, which
// would spread into the output if attention read them.
struct Cache {
  int n_ctx, n_kv, hd;
  std::vector<uint16_t> k, v;
  std::vector<float> kf, vf;  // the f16 values widened, [pos][h][d]
  Cache(int n_ctx_, int n_kv_, int hd_, uint32_t seed) : n_ctx(n_ctx_), n_kv(n_kv_), hd(hd_) {
    const size_t n = static_cast<size_t>(n_ctx * n_kv * hd);
    k.resize(n);
    v.resize(n);
    kf = random_floats(n, seed);
    vf = random_floats(n, seed + 1);
    for (int p = 0; p < n_ctx; ++p)
      for (int h = 0; h < n_kv; ++h)
        for (int d = 0; d < hd; ++d) {
          const size_t at = static_cast<size_t>((p * n_kv + h) * hd + d);
          k[at] = quant::fp32_to_fp16(kf[at]);
          kf[at] = quant::fp16_to_fp32(k[at]);
          v[static_cast<size_t>((h * hd + d) * n_ctx + p)] = quant::fp32_to_fp16(vf[at]);
          vf[at] = quant::fp16_to_fp32(quant::fp32_to_fp16(vf[at]));
        }
  }
  void poison(int p) {
    const uint16_t nan = 0x7e00;
    for (int h = 0; h < n_kv; ++h)
      for (int d = 0; d < hd; ++d) {
        k[static_cast<size_t>((p * n_kv + h) * hd + d)] = nan;
        v[static_cast<size_t>((h * hd + d) * n_ctx + p)] = nan;
      }
  }
  backend::KvCacheView view() { return {k.data(), v.data(), n_ctx, n_kv, hd}; }
};

// float64 attention over the widened f16 values: query rounded to f16, sinks in the max and denominator.
std::vector<double> reference_attention(const Cache& c, const std::vector<float>& q, int rows, int pos0,
                                        int n_head, double scale, const float* sinks, int window) {
  std::vector<double> out(static_cast<size_t>(rows * n_head * c.hd));
  const int group = n_head / c.n_kv;
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < n_head; ++h) {
      const int p = pos0 + r, kh = h / group;
      const int first = window > 0 ? std::max(0, p - window + 1) : 0;
      std::vector<double> s;
      double max = sinks ? sinks[h] : -std::numeric_limits<double>::infinity();
      for (int j = first; j <= p; ++j) {
        double dot = 0;
        for (int d = 0; d < c.hd; ++d)
          dot += double(quant::fp16_to_fp32(
                     quant::fp32_to_fp16(q[static_cast<size_t>((r * n_head + h) * c.hd + d)]))) *
                 c.kf[static_cast<size_t>((j * c.n_kv + kh) * c.hd + d)];
        s.push_back(dot * scale);
        max = std::max(max, s.back());
      }
      double sum = sinks ? std::exp(sinks[h] - max) : 0.0;
      for (double& x : s) sum += (x = std::exp(x - max));
      for (int d = 0; d < c.hd; ++d) {
        double o = 0;
        for (int j = first; j <= p; ++j)
          o += s[static_cast<size_t>(j - first)] / sum *
               c.vf[static_cast<size_t>((j * c.n_kv + kh) * c.hd + d)];
        out[static_cast<size_t>((r * n_head + h) * c.hd + d)] = o;
      }
    }
  return out;
}

TEST(GptOssOps, AttentionWithSinksAndWindowMatchesTheReferenceAndNeverReadsMaskedKeys) {
  const int n_ctx = 40, n_kv = 2, n_head = 6, hd = 18, rows = 9, pos0 = 23, window = 7;
  Cache c(n_ctx, n_kv, hd, 11);
  for (int p = 0; p < pos0 - window + 1; ++p) c.poison(p);  // older than every query's window
  for (int p = pos0 + rows; p < n_ctx; ++p) c.poison(p);    // the future
  const auto q = random_floats(static_cast<size_t>(rows * n_head * hd), 3, 2.0f);
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f, 3.5f, -4.0f};
  std::vector<float> out(q.size()), scratch(attention_scratch_floats(n_ctx, hd));
  const float scale = 1.0f / std::sqrt(float(hd));
  attention_sinks(c.view(), q.data(), rows, pos0, n_head, scale, sinks.data(), window, out.data(), scratch);
  const auto want = reference_attention(c, q, rows, pos0, n_head, scale, sinks.data(), window);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << i;
    EXPECT_NEAR(out[i], want[i], 2e-3) << i;  // the f16 probabilities
  }
}

TEST(GptOssOps, WithoutSinksOrWindowItIsTheBackendsCausalAttention) {
  const int n_ctx = 33, n_kv = 3, n_head = 6, hd = 16, rows = 33;
  Cache c(n_ctx, n_kv, hd, 5);
  const auto q = random_floats(static_cast<size_t>(rows * n_head * hd), 9);
  backend::CpuBackend be(2);
  std::vector<float> a(q.size()), b(q.size()), sa(attention_scratch_floats(n_ctx, hd)),
      sb(be.attention_scratch_floats(n_ctx, hd));
  attention_sinks(c.view(), q.data(), rows, 0, n_head, 0.25f, nullptr, 0, a.data(), sa);
  be.attention(c.view(), q.data(), rows, 0, n_head, 0.25f, b.data(), sb);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f) << i;
}

// A sink logit far above every score takes all the probability mass: the output goes to zero.
TEST(GptOssOps, ADominantSinkSilencesTheHead) {
  Cache c(8, 1, 8, 21);
  const auto q = random_floats(8 * 2 * 8, 4);
  const std::vector<float> sinks = {40.0f, -40.0f};
  std::vector<float> out(q.size()), scratch(attention_scratch_floats(8, 8));
  attention_sinks(c.view(), q.data(), 8, 0, 2, 0.35f, sinks.data(), 0, out.data(), scratch);
  double head0 = 0, head1 = 0;
  for (int r = 0; r < 8; ++r)
    for (int d = 0; d < 8; ++d) {
      head0 = std::max(head0, double(std::abs(out[static_cast<size_t>((r * 2) * 8 + d)])));
      head1 = std::max(head1, double(std::abs(out[static_cast<size_t>((r * 2 + 1) * 8 + d)])));
    }
  EXPECT_LT(head0, 1e-6);
  EXPECT_GT(head1, 0.1);
}

TEST(GptOssOps, AttentionRejectsBadShapes) {
  Cache c(4, 2, 8, 1);
  std::vector<float> q(3 * 8), out(q.size()), scratch(attention_scratch_floats(4, 8));
  EXPECT_THROW(attention_sinks(c.view(), q.data(), 1, 0, 3, 1.0f, nullptr, 0, out.data(), scratch), Error);
  EXPECT_THROW(attention_sinks(c.view(), q.data(), 1, 4, 2, 1.0f, nullptr, 0, out.data(), scratch), Error);
  std::vector<float> small(2);
  EXPECT_THROW(attention_sinks(c.view(), q.data(), 1, 0, 2, 1.0f, nullptr, 0, out.data(), small), Error);
}

TEST(GptOssOps, OaiSwigluClampsGateAboveAndUpBothWays) {
  const std::vector<float> g = {-3.0f, 0.0f, 1.5f, 6.9f, 7.0f, 12.0f, 2.0f, -20.0f};
  const std::vector<float> u = {0.5f, 3.0f, -1.0f, 2.0f, 9.0f, -9.0f, 7.5f, 1.0f};
  std::vector<float> y(g.size());
  swiglu_oai(g.data(), u.data(), static_cast<int64_t>(g.size()), 1.702f, 7.0f, y.data());
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = std::min(double(g[i]), 7.0), up = std::clamp(double(u[i]), -7.0, 7.0);
    const double want = x / (1.0 + std::exp(-1.702 * x)) * (up + 1.0);
    EXPECT_NEAR(y[i], want, 1e-5 * std::max(1.0, std::abs(want))) << i;
  }
  EXPECT_NEAR(y[5], 7.0 / (1.0 + std::exp(-1.702 * 7.0)) * -6.0, 1e-4);
}

TEST(GptOssOps, SoftmaxWeightRoutingTakesTheTopKLogitsAndSoftmaxesThem) {
  // Row 0: a tie between experts 1 and 4 at the boundary goes to the lower id.
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 3.0f, 2.0f, 0.5f,    // row 0
                                     -5.f, -4.f, -3.f,  -2.f, -1.f, -0.5f};  // row 1
  std::vector<int32_t> ids(6);
  std::vector<float> w(6);
  route_softmax_weight(logits.data(), 2, 6, 3, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 1, 4, 5, 4, 3}));
  const auto check = [&](int r, std::vector<double> z) {
    double sum = 0;
    const double max = z[0];
    for (double& x : z) sum += (x = std::exp(x - max));
    for (int j = 0; j < 3; ++j)
      EXPECT_NEAR(w[static_cast<size_t>(r * 3 + j)], z[static_cast<size_t>(j)] / sum, 1e-6);
  };
  check(0, {3.0, 2.0, 2.0});
  check(1, {-0.5, -1.0, -2.0});
  EXPECT_THROW(route_softmax_weight(logits.data(), 1, 6, 7, ids.data(), w.data()), Error);
}

TEST(GptOssOps, BiasRowsAddTheSameVectorToEveryRow) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {10, 20, 30};
  add_bias_rows(x.data(), b.data(), 2, 3);
  EXPECT_EQ(x, (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

}  // namespace
}  // namespace df::models::gpt_oss

// The backend's RoPE (YaRN, normal mode, frequency factors) and attention (sinks, sliding window, softcap),
// the routing of gpt-oss (SoftmaxWeight) and bias rows, against float64 references written from
// ARCHITECTURES.md 1.3-1.6 and 7.2, on random inputs and odd shapes. (These ops were gpt-oss's own,
// single-threaded, before they moved into the backend: every test runs on two threads.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cpu_host_backend.h"
#include "quant/quant.h"
#include "random_data.h"
#include "util/error.h"

namespace df::backend {
namespace {

using df::testing::random_floats;

// gpt-oss-20b's RoPE (ARCHITECTURES.md 7.2): d = 64, base 150000, YaRN factor 32 over 4096 positions. The
// correction band is pairs lo = floor(corr(32)) = 8 .. hi = ceil(corr(1)) = 18: pairs up to 8 keep the
// extrapolated angle, pairs from 18 on are fully interpolated (angle / 32), the ones between mix the two
// linearly, and every pair is scaled by m = 1 + 0.1 ln 32. The reference is float64 from the spec; the
// tolerance is what float arithmetic allows and no more: ggml's recurrence theta_i = pos * s^i in float
// rounds about 2i+1 times (2^-24 each, relative to the angle), plus ~1e-7 for float cos and sin.
TEST(BackendRopeAttention, YarnRopeAnglesAndMagnitudeFollowTheSpec) {
  HostCpuBackend be(2);
  RopeParams p;
  p.n_rot = 64;
  p.freq_base = 150000.0f;
  p.freq_scale = 1.0f / 32.0f;
  p.ext_factor = 1.0f;
  p.n_ctx_orig = 4096;
  p.attn_factor =
      1.0f;  // llama.cpp's context passes ~1 here (models/rope_scaling.h); the op adds the magnitude
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
      be.rope(v.data(), 1, 1, 64, &pos, p);
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

// Plain RoPE in both modes, with and without frequency factors, against float64: NeoX rotates (i, i + n/2),
// normal mode adjacent pairs (2i, 2i + 1); θ_i = p · base^(-2i/n) / ff_i; dims past n_rot untouched. The
// tolerance is float rounding of the recurrence (see the YaRN test).
TEST(BackendRopeAttention, NeoxAndNormalModesWithFrequencyFactorsFollowTheSpec) {
  HostCpuBackend be(2);
  const int n_head = 3, hd = 10, rows = 5, n_rot = 6;
  const int32_t pos[rows] = {0, 1, 5, 100, 4095};
  const std::vector<float> factors = {1.0f, 2.5f, 8.0f};
  for (RopeMode mode : {RopeMode::NeoX, RopeMode::Normal})
    for (bool with_factors : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << (mode == RopeMode::NeoX ? "neox" : "normal") << (with_factors ? " factors" : ""));
      auto a = random_floats(static_cast<size_t>(rows * n_head * hd), 7);
      const auto orig = a;
      RopeParams p;
      p.mode = mode;
      p.n_rot = n_rot;
      p.freq_base = 10000.0f;
      p.freq_factors = HostCpuBackend::h(with_factors ? factors.data() : nullptr);
      be.rope(a.data(), rows, n_head, hd, pos, p);
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < n_head; ++h) {
          const float* o = orig.data() + (r * n_head + h) * hd;
          const float* v = a.data() + (r * n_head + h) * hd;
          for (int i = 0; i < n_rot / 2; ++i) {
            const double theta = pos[r] * std::pow(10000.0, -2.0 * i / n_rot) /
                                 (with_factors ? factors[static_cast<size_t>(i)] : 1.0);
            const int i0 = mode == RopeMode::NeoX ? i : 2 * i,
                      i1 = mode == RopeMode::NeoX ? i + n_rot / 2 : 2 * i + 1;
            const double tol = (2.0 * i + 3.0) * std::ldexp(1.0, -24) * pos[r] * 4 + 1e-6;
            EXPECT_NEAR(v[i0], o[i0] * std::cos(theta) - o[i1] * std::sin(theta), tol)
                << r << " " << h << " " << i;
            EXPECT_NEAR(v[i1], o[i0] * std::sin(theta) + o[i1] * std::cos(theta), tol)
                << r << " " << h << " " << i;
          }
          for (int d = n_rot; d < hd; ++d) EXPECT_EQ(v[d], o[d]);
        }
    }
  std::vector<float> x(12);
  const int32_t p0 = 0;
  EXPECT_THROW(be.rope(x.data(), 1, 1, 10, &p0, RopeParams{.n_rot = 12}), Error);
  RopeParams yarn_without_context{.n_rot = 4, .ext_factor = 1.0f};
  EXPECT_THROW(be.rope(x.data(), 1, 1, 10, &p0, yarn_without_context), Error);
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
  backend::KvCacheView view() { return host_kv(k.data(), v.data(), n_ctx, n_kv, hd); }
};

// float64 attention over the widened f16 values: query rounded to f16, sinks in the max and denominator.
std::vector<double> reference_attention(const Cache& c, const std::vector<float>& q, int rows, int pos0,
                                        int n_head, double scale, const float* sinks, int window,
                                        double softcap = 0) {
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
        double score = dot * scale;
        if (softcap > 0) score = softcap * std::tanh(score / softcap);
        s.push_back(score);
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

TEST(BackendRopeAttention, AttentionWithSinksAndWindowMatchesTheReferenceAndNeverReadsMaskedKeys) {
  const int n_ctx = 40, n_kv = 2, n_head = 6, hd = 18, rows = 9, pos0 = 23, window = 7;
  Cache c(n_ctx, n_kv, hd, 11);
  for (int p = 0; p < pos0 - window + 1; ++p) c.poison(p);  // older than every query's window
  for (int p = pos0 + rows; p < n_ctx; ++p) c.poison(p);    // the future
  const auto q = random_floats(static_cast<size_t>(rows * n_head * hd), 3, 2.0f);
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f, 3.5f, -4.0f};
  HostCpuBackend be(2);
  std::vector<float> out(q.size()), scratch(be.attention_scratch_floats(n_ctx, hd));
  const float scale = 1.0f / std::sqrt(float(hd));
  be.attention(c.view(), q.data(), rows, pos0,
               AttentionParams{n_head, scale, window, HostCpuBackend::h(sinks.data())}, out.data(), scratch);
  const auto want = reference_attention(c, q, rows, pos0, n_head, scale, sinks.data(), window);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << i;
    EXPECT_NEAR(out[i], want[i], 2e-3) << i;  // the f16 probabilities
  }
}

// A logit softcap (Gemma) bends large scores: softcap · tanh(score / softcap) before the softmax.
TEST(BackendRopeAttention, SoftcapMatchesTheReference) {
  const int n_ctx = 21, n_kv = 1, n_head = 2, hd = 16, rows = 21;
  Cache c(n_ctx, n_kv, hd, 5);
  const auto q = random_floats(static_cast<size_t>(rows * n_head * hd), 9, 4.0f);  // large scores
  HostCpuBackend be(2);
  std::vector<float> out(q.size()), scratch(be.attention_scratch_floats(n_ctx, hd));
  AttentionParams p{n_head, 0.5f};
  p.softcap = 5.0f;
  be.attention(c.view(), q.data(), rows, 0, p, out.data(), scratch);
  const auto want = reference_attention(c, q, rows, 0, n_head, 0.5, nullptr, 0, 5.0);
  const auto uncapped = reference_attention(c, q, rows, 0, n_head, 0.5, nullptr, 0);
  double moved = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_NEAR(out[i], want[i], 2e-3) << i;
    moved = std::max(moved, std::abs(want[i] - uncapped[i]));
  }
  EXPECT_GT(moved, 0.05) << "the scores were too small for the cap to matter";
}

// gemma4's attention shapes (ARCHITECTURES.md 4.1): 16 query heads over 8 KV heads of 256 dims with a
// sliding window (the sliding layers), and over 2 KV heads of 512 dims without one (the global layers);
// scale 1.0 (q and k are RMS-normed per head, so scores stay moderate: q and k of unit RMS here, divided
// down so that the softmax is not one-hot). The masked positions hold NaN.
TEST(BackendRopeAttention, Gemma4ShapesHeadDims256And512MatchTheReference) {
  struct Shape {
    int n_kv, hd, window;
  };
  for (const Shape sh : {Shape{8, 256, 5}, Shape{2, 512, 0}}) {
    const int n_ctx = 24, n_head = 16, rows = 4, pos0 = 17;
    Cache c(n_ctx, sh.n_kv, sh.hd, 31);
    if (sh.window > 0)
      for (int p = 0; p < pos0 - sh.window + 1; ++p) c.poison(p);
    for (int p = pos0 + rows; p < n_ctx; ++p) c.poison(p);
    const auto q = random_floats(static_cast<size_t>(rows * n_head * sh.hd), 32, 0.1f);
    for (int threads : {1, 2}) {
      HostCpuBackend be(threads);
      std::vector<float> out(q.size()), scratch(be.attention_scratch_floats(n_ctx, sh.hd));
      AttentionParams p{n_head, 1.0f};
      p.window = sh.window;
      be.attention(c.view(), q.data(), rows, pos0, p, out.data(), scratch);
      const auto want = reference_attention(c, q, rows, pos0, n_head, 1.0, nullptr, sh.window);
      for (size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(std::isfinite(out[i])) << "hd " << sh.hd << " at " << i;
        ASSERT_NEAR(out[i], want[i], 3e-3) << "hd " << sh.hd << " at " << i;  // the f16 probabilities
      }
    }
  }
}

// gemma4's RoPE: NeoX over the whole head. Sliding layers: d = 256, θ 1e4, no factors. Global layers
// (proportional RoPE): d = 512, θ 1e6, freq_factors [1] × 64 ++ [1e30] × 192 — pairs 0..63 rotate by
// p · 1e6^(-2i/512), the others by p · ... / 1e30 (cos 1, sin below an ulp of the values): unchanged bits.
TEST(BackendRopeAttention, Gemma4ProportionalRopeRotatesOnlyTheFactorOnePairs) {
  const int n_head = 2;
  const std::vector<int32_t> pos = {0, 1, 1023, 70000};
  const int rows = static_cast<int>(pos.size());
  for (const bool global : {false, true}) {
    const int hd = global ? 512 : 256;
    const double base = global ? 1e6 : 1e4;
    std::vector<float> factors(static_cast<size_t>(hd / 2), 1.0f);
    if (global) std::fill(factors.begin() + 64, factors.end(), 1e30f);
    const auto x0 = random_floats(static_cast<size_t>(rows * n_head * hd), 41);
    auto x = x0;
    HostCpuBackend be(2);
    RopeParams p{.mode = RopeMode::NeoX, .n_rot = hd, .freq_base = static_cast<float>(base)};
    if (global) p.freq_factors = HostCpuBackend::h(factors.data());
    be.rope(x.data(), rows, n_head, hd, pos.data(), p);
    const int half = hd / 2;
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < n_head; ++h) {
        const float* o = x0.data() + (r * n_head + h) * hd;
        const float* v = x.data() + (r * n_head + h) * hd;
        for (int i = 0; i < half; ++i) {
          if (factors[static_cast<size_t>(i)] != 1.0f) {
            EXPECT_EQ(v[i], o[i]) << r << " " << h << " " << i;
            EXPECT_EQ(v[i + half], o[i + half]) << r << " " << h << " " << i;
            continue;
          }
          const double theta = pos[static_cast<size_t>(r)] * std::pow(base, -2.0 * i / hd);
          const double tol = (2.0 * i + 3.0) * std::ldexp(1.0, -24) * pos[static_cast<size_t>(r)] * 4 + 1e-6;
          EXPECT_NEAR(v[i], o[i] * std::cos(theta) - o[i + half] * std::sin(theta), tol) << r << " " << i;
          EXPECT_NEAR(v[i + half], o[i] * std::sin(theta) + o[i + half] * std::cos(theta), tol)
              << r << " " << i;
        }
      }
  }
}

// A sink logit far above every score takes all the probability mass: the output goes to zero.
TEST(BackendRopeAttention, ADominantSinkSilencesTheHead) {
  Cache c(8, 1, 8, 21);
  const auto q = random_floats(8 * 2 * 8, 4);
  const std::vector<float> sinks = {40.0f, -40.0f};
  HostCpuBackend be(2);
  std::vector<float> out(q.size()), scratch(be.attention_scratch_floats(8, 8));
  be.attention(c.view(), q.data(), 8, 0, AttentionParams{2, 0.35f, 0, HostCpuBackend::h(sinks.data())},
               out.data(), scratch);
  double head0 = 0, head1 = 0;
  for (int r = 0; r < 8; ++r)
    for (int d = 0; d < 8; ++d) {
      head0 = std::max(head0, double(std::abs(out[static_cast<size_t>((r * 2) * 8 + d)])));
      head1 = std::max(head1, double(std::abs(out[static_cast<size_t>((r * 2 + 1) * 8 + d)])));
    }
  EXPECT_LT(head0, 1e-6);
  EXPECT_GT(head1, 0.1);
}

TEST(BackendRopeAttention, AttentionRejectsBadShapes) {
  Cache c(4, 2, 8, 1);
  HostCpuBackend be(2);
  std::vector<float> q(3 * 8), out(q.size()), scratch(be.attention_scratch_floats(4, 8));
  EXPECT_THROW(be.attention(c.view(), q.data(), 1, 0, AttentionParams{3, 1.0f}, out.data(), scratch), Error);
  EXPECT_THROW(be.attention(c.view(), q.data(), 1, 4, AttentionParams{2, 1.0f}, out.data(), scratch), Error);
  EXPECT_THROW(be.attention(c.view(), q.data(), 1, 0, AttentionParams{2, 1.0f, -1}, out.data(), scratch),
               Error);
  std::vector<float> small(2);
  EXPECT_THROW(be.attention(c.view(), q.data(), 1, 0, AttentionParams{2, 1.0f}, out.data(), small), Error);
}

TEST(BackendRopeAttention, SoftmaxWeightRoutingTakesTheTopKLogitsAndSoftmaxesThem) {
  // Row 0: a tie between experts 1 and 4 at the boundary goes to the lower id.
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 3.0f, 2.0f, 0.5f,    // row 0
                                     -5.f, -4.f, -3.f,  -2.f, -1.f, -0.5f};  // row 1
  std::vector<int32_t> ids(6);
  std::vector<float> w(6);
  HostCpuBackend be(2);
  RouterParams p;
  p.gating = Gating::SoftmaxWeight;
  p.n_expert = 6;
  p.k = 3;
  be.route(p, logits.data(), 2, ids.data(), w.data());
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
  p.k = 7;
  EXPECT_THROW(be.route(p, logits.data(), 1, ids.data(), w.data()), Error);
}

TEST(BackendRopeAttention, BiasRowsAddTheSameVectorToEveryRow) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {10, 20, 30};
  HostCpuBackend be(1);
  be.add_bias_rows(x.data(), b.data(), 2, 3);
  EXPECT_EQ(x, (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

}  // namespace
}  // namespace df::backend

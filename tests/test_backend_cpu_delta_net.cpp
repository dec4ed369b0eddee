// qwen35moe's CPU ops (backend.h: delta_net_conv, gated_delta_net, mul_sigmoid) against plain float64
// references written out here, over many shapes and realistic values; the properties the model relies on, bit
// for bit: a run of tokens in one call or in several, any thread count, the same call twice; the SIMD kernels
// of the delta rule against ggml's helpers emulated lane by lane, and against the scalar level; df::Error on
// misuse and short buffers; and no allocation per call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels/cpu_features.h"
#include "backend/cpu/kernels/delta_rule.h"
#include "counting_operator_new.h"
#include "error_matchers.h"
#include "util/error.h"

namespace df::backend {
namespace {

using kernels::SimdLevel;

std::vector<float> normal(size_t n, uint32_t seed, float mean = 0.0f, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Bounded views of the test's arrays: the ops check every size against them.
template <class T>
Buf<T> view(std::vector<T>& v) {
  return CpuBackend::host(v.data(), v.size());
}
template <class T>
Buf<const T> view(const std::vector<T>& v) {
  return CpuBackend::host(v.data(), v.size());
}
template <class T>
Buf<const T> cview(const std::vector<T>& v, size_t offset, size_t n) {
  return CpuBackend::host(v.data() + offset, n);
}
template <class T>
Buf<T> mview(std::vector<T>& v, size_t offset, size_t n) {
  return CpuBackend::host(v.data() + offset, n);
}

std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : kernels::kAllSimdLevels)
    if (kernels::simd_level_supported(l)) out.push_back(l);
  return out;
}

double silu_d(double x) { return x / (1.0 + std::exp(-x)); }

// ---- delta_net_conv ----

struct ConvCase {
  int taps;
  int64_t channels, rows;
};

struct ConvData {
  std::vector<float> u, w, state0;
};

ConvData conv_data(const ConvCase& c, uint32_t seed) {
  return {normal(size_t(c.rows * c.channels), seed),
          normal(size_t(c.channels * c.taps), seed + 1, 0.0f, 0.5f),
          normal(size_t((c.taps - 1) * c.channels), seed + 2)};
}

// Runs the conv over rows [r0, r1) of d.u with the given state, writing y rows [r0, r1).
void run_conv(CpuBackend& be, const ConvCase& c, const ConvData& d, int64_t r0, int64_t r1,
              std::vector<float>& state, std::vector<float>& y) {
  const size_t at = size_t(r0 * c.channels), n = size_t((r1 - r0) * c.channels);
  be.delta_net_conv(cview(d.u, at, n), r1 - r0, c.channels, view(d.w), c.taps, view(state), mview(y, at, n));
}

const ConvCase kConvCases[] = {
    {2, 8, 1},     {3, 8, 5},     {4, 8, 100},  {2, 37, 5},  {3, 37, 100},
    {4, 37, 1},    {4, 64, 5},    {2, 64, 100}, {3, 600, 1}, {4, 600, 5},
    {2, 600, 100}, {4, 600, 100}, {3, 64, 1},   {2, 600, 1}, {3, 600, 100},
};

TEST(DeltaNetConv, MatchesFloat64ReferenceAndKeepsTheLastRawRows) {
  CpuBackend be(2);
  uint32_t seed = 100;
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(::testing::Message()
                 << "taps=" << c.taps << " channels=" << c.channels << " rows=" << c.rows);
    const ConvData d = conv_data(c, seed += 10);
    auto state = d.state0;
    std::vector<float> y(d.u.size());
    run_conv(be, c, d, 0, c.rows, state, y);
    const int64_t hist = c.taps - 1;
    for (int64_t ch = 0; ch < c.channels; ++ch) {
      // The sequence of this channel: the state rows, oldest first, then u.
      std::vector<float> seq;
      for (int64_t j = 0; j < hist; ++j) seq.push_back(d.state0[size_t(j * c.channels + ch)]);
      for (int64_t t = 0; t < c.rows; ++t) seq.push_back(d.u[size_t(t * c.channels + ch)]);
      for (int64_t t = 0; t < c.rows; ++t) {
        double sum = 0, mag = 0;
        for (int j = 0; j < c.taps; ++j) {
          const double term = double(d.w[size_t(ch * c.taps + j)]) * seq[size_t(t + j)];
          sum += term;
          mag += std::abs(term);
        }
        const double ref = silu_d(sum);
        ASSERT_NEAR(y[size_t(t * c.channels + ch)], ref, 1e-5 * (std::abs(ref) + mag))
            << "t=" << t << " c=" << ch;
      }
      // The state: the last taps - 1 raw values of the sequence, copied.
      for (int64_t j = 0; j < hist; ++j)
        ASSERT_EQ(state[size_t(j * c.channels + ch)], seq[seq.size() - size_t(hist) + size_t(j)]) << j;
    }
  }
}

TEST(DeltaNetConv, RowsSplitOverCallsGiveTheSameBits) {
  CpuBackend be(2);
  for (const ConvCase& c : {ConvCase{4, 600, 100}, ConvCase{3, 37, 100}, ConvCase{2, 64, 100}}) {
    SCOPED_TRACE(::testing::Message() << "taps=" << c.taps << " channels=" << c.channels);
    const ConvData d = conv_data(c, 7);
    auto state = d.state0;
    std::vector<float> y(d.u.size());
    run_conv(be, c, d, 0, c.rows, state, y);
    for (int64_t split : {1, 2, 3, 4, 50, 99}) {
      auto state2 = d.state0;
      std::vector<float> y2(y.size());
      run_conv(be, c, d, 0, split, state2, y2);
      run_conv(be, c, d, split, c.rows, state2, y2);
      EXPECT_EQ(y2, y) << "split at " << split;
      EXPECT_EQ(state2, state) << "split at " << split;
    }
    // Token by token, as decode runs it.
    auto state1 = d.state0;
    std::vector<float> y1(y.size());
    for (int64_t t = 0; t < c.rows; ++t) run_conv(be, c, d, t, t + 1, state1, y1);
    EXPECT_EQ(y1, y);
    EXPECT_EQ(state1, state);
  }
}

TEST(DeltaNetConv, ThreadCountsAndRepeatsGiveTheSameBits) {
  CpuBackend one(1), two(2), three(3);
  for (const ConvCase& c : {ConvCase{4, 600, 100}, ConvCase{4, 8200, 1}, ConvCase{3, 600, 5}}) {
    SCOPED_TRACE(::testing::Message() << "channels=" << c.channels << " rows=" << c.rows);
    const ConvData d = conv_data(c, 9);
    auto state = d.state0;
    std::vector<float> y(d.u.size());
    run_conv(one, c, d, 0, c.rows, state, y);
    for (CpuBackend* be : {&one, &two, &three}) {
      auto state2 = d.state0;
      std::vector<float> y2(y.size());
      run_conv(*be, c, d, 0, c.rows, state2, y2);
      EXPECT_EQ(y2, y) << be->n_threads() << " threads";
      EXPECT_EQ(state2, state) << be->n_threads() << " threads";
    }
  }
}

TEST(DeltaNetConv, RejectsTapsOutOfRangeAndShortBuffers) {
  CpuBackend be(1);
  const ConvCase c{4, 37, 5};
  const ConvData d = conv_data(c, 11);
  auto state = d.state0;
  std::vector<float> y(d.u.size());
  for (int taps : {0, 1, 65}) {
    std::vector<float> w(size_t(c.channels * std::max(taps, 1))), st(size_t(c.channels * 70));
    testing::expect_error(
        [&] { be.delta_net_conv(view(d.u), c.rows, c.channels, view(w), taps, view(st), view(y)); },
        {"taps", "out of range"});
  }
  const size_t n_u = d.u.size(), n_w = d.w.size(), n_s = state.size(), n_y = y.size();
  auto call = [&](size_t u_n, size_t w_n, size_t s_n, size_t y_n) {
    be.delta_net_conv(cview(d.u, 0, u_n), c.rows, c.channels, cview(d.w, 0, w_n), c.taps,
                      mview(state, 0, s_n), mview(y, 0, y_n));
  };
  testing::expect_error([&] { call(n_u - 1, n_w, n_s, n_y); }, {"out of range"});
  testing::expect_error([&] { call(n_u, n_w - 1, n_s, n_y); }, {"out of range"});
  testing::expect_error([&] { call(n_u, n_w, n_s - 1, n_y); }, {"out of range"});
  testing::expect_error([&] { call(n_u, n_w, n_s, n_y - 1); }, {"out of range"});
  EXPECT_EQ(state, d.state0);  // nothing ran
  call(n_u, n_w, n_s, n_y);    // exact sizes are enough
}

// ---- gated_delta_net ----

struct NetCase {
  int nk, nv, d;
  int64_t rows;
};

struct NetData {
  NetCase c;
  std::vector<float> qkv, alpha, beta, dt_bias, ssm_a, state0;
  float eps = 1e-6f;

  int64_t width() const { return int64_t(2 * c.nk * c.d + c.nv * c.d); }
  DeltaNetParams params() const {
    DeltaNetParams p;
    p.n_k_heads = c.nk;
    p.n_v_heads = c.nv;
    p.head_dim = c.d;
    p.eps = eps;
    p.dt_bias = view(dt_bias);
    p.ssm_a = view(ssm_a);
    return p;
  }
};

// Realistic values: the conv's outputs around 0, alpha + dt_bias around -3 (dt_bias in [-4, -2]), ssm_a =
// -exp(A_log) in [-8, -1], beta any raw logit; the state empty or a previous one.
NetData net_data(const NetCase& c, uint32_t seed, bool empty_state = false) {
  NetData d{c, {}, {}, {}, {}, {}, {}};
  d.qkv = normal(size_t(c.rows * d.width()), seed);
  d.alpha = normal(size_t(c.rows * c.nv), seed + 1);
  d.beta = normal(size_t(c.rows * c.nv), seed + 2, 0.0f, 3.0f);
  d.dt_bias = uniform(size_t(c.nv), seed + 3, -4.0f, -2.0f);
  d.ssm_a = uniform(size_t(c.nv), seed + 4, -8.0f, -1.0f);
  d.state0 = empty_state ? std::vector<float>(size_t(c.nv * c.d * c.d))
                         : normal(size_t(c.nv * c.d * c.d), seed + 5, 0.0f, 0.3f);
  return d;
}

void run_net(CpuBackend& be, const NetData& d, int64_t r0, int64_t r1, std::vector<float>& state,
             std::vector<float>& out) {
  const int64_t W = d.width(), nv = d.c.nv, D = d.c.d;
  be.gated_delta_net(d.params(), cview(d.qkv, size_t(r0 * W), size_t((r1 - r0) * W)),
                     cview(d.alpha, size_t(r0 * nv), size_t((r1 - r0) * nv)),
                     cview(d.beta, size_t(r0 * nv), size_t((r1 - r0) * nv)), r1 - r0, view(state),
                     mview(out, size_t(r0 * nv * D), size_t((r1 - r0) * nv * D)));
}

// The gated delta rule in double, straight from its definition (backend.h), S_h[i][j] by key i, value j.
struct NetReference {
  std::vector<double> out;      // rows × nv × d
  std::vector<double> out_mag;  // per output: Σ_i |S[i][j] q_i| / sqrt(d), the scale of its rounding errors
  std::vector<double> state;    // nv × d × d, ggml's layout: [h][j][i]
};

NetReference reference(const NetData& dd) {
  const NetCase& c = dd.c;
  const int64_t W = dd.width(), d = c.d;
  NetReference r;
  r.out.assign(size_t(c.rows * c.nv * d), 0.0);
  r.out_mag.assign(r.out.size(), 0.0);
  r.state.assign(dd.state0.begin(), dd.state0.end());
  auto l2 = [&](const float* x) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += double(x[i]) * x[i];
    const double s = 1.0 / std::max(std::sqrt(ss), double(dd.eps));
    std::vector<double> y(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) y[size_t(i)] = x[i] * s;
    return y;
  };
  for (int64_t t = 0; t < c.rows; ++t) {
    const float* row = dd.qkv.data() + t * W;
    for (int64_t h = 0; h < c.nv; ++h) {
      const int64_t kh = h % c.nk;
      const auto q = l2(row + kh * d), k = l2(row + c.nk * d + kh * d);
      const float* v = row + 2 * c.nk * d + h * d;
      const double beta = 1.0 / (1.0 + std::exp(-double(dd.beta[size_t(t * c.nv + h)])));
      const double x = double(dd.alpha[size_t(t * c.nv + h)]) + dd.dt_bias[size_t(h)];
      const double g = (x > 20 ? x : std::log1p(std::exp(x))) * dd.ssm_a[size_t(h)];
      double* S = r.state.data() + h * d * d;
      auto at = [&](int64_t i, int64_t j) -> double& { return S[j * d + i]; };
      for (int64_t n = 0; n < d * d; ++n) S[n] *= std::exp(g);
      for (int64_t j = 0; j < d; ++j) {
        double sk = 0;
        for (int64_t i = 0; i < d; ++i) sk += at(i, j) * k[size_t(i)];
        const double delta = (v[j] - sk) * beta;
        for (int64_t i = 0; i < d; ++i) at(i, j) += k[size_t(i)] * delta;
      }
      for (int64_t j = 0; j < d; ++j) {
        double o = 0, mag = 0;
        for (int64_t i = 0; i < d; ++i) {
          o += at(i, j) * q[size_t(i)];
          mag += std::abs(at(i, j) * q[size_t(i)]);
        }
        r.out[size_t((t * c.nv + h) * d + j)] = o / std::sqrt(double(d));
        r.out_mag[size_t((t * c.nv + h) * d + j)] = mag / std::sqrt(double(d));
      }
    }
  }
  return r;
}

// |got - ref| <= tol · (|ref| + the RMS of its group + mag[i]): relative, without failing on a value that
// happens to be near zero among others that are not, or that is a sum of larger terms that cancel (mag: their
// magnitude, when given).
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, int64_t group, double tol,
                  const char* what, const std::vector<double>* mag = nullptr) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t g0 = 0; g0 < ref.size(); g0 += size_t(group)) {
    double ss = 0;
    for (size_t i = g0; i < g0 + size_t(group); ++i) ss += ref[i] * ref[i];
    const double rms = std::sqrt(ss / double(group));
    for (size_t i = g0; i < g0 + size_t(group); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << what << " " << i;
      ASSERT_NEAR(got[i], ref[i], tol * (std::abs(ref[i]) + rms + (mag ? (*mag)[i] : 0.0)))
          << what << " " << i;
    }
  }
}

std::vector<NetCase> net_cases() {
  std::vector<NetCase> out;
  for (auto [nk, nv] : {std::pair{1, 1}, std::pair{2, 4}, std::pair{3, 6}})
    for (int d : {8, 17, 32, 64, 100, 128})
      for (int64_t rows : {1, 5, 100}) out.push_back({nk, nv, d, rows});
  return out;
}

TEST(GatedDeltaNet, MatchesFloat64ReferenceAtEveryLevel) {
  uint32_t seed = 1000;
  for (SimdLevel level : supported_levels()) {
    CpuBackend be(2, level);
    for (const NetCase& c : net_cases()) {
      SCOPED_TRACE(::testing::Message() << kernels::simd_level_name(level) << " nk=" << c.nk << " nv=" << c.nv
                                        << " d=" << c.d << " rows=" << c.rows);
      const NetData d = net_data(c, seed += 10, c.rows == 5);
      auto state = d.state0;
      std::vector<float> out(size_t(c.rows * c.nv * c.d));
      run_net(be, d, 0, c.rows, state, out);
      const NetReference ref = reference(d);
      expect_close(out, ref.out, c.d, 1e-5, "out", &ref.out_mag);
      expect_close(state, ref.state, c.d, 1e-5, "state");
    }
  }
}

// A head whose q or k is all zeros: the L2 norm's floor keeps it finite (zeros), as ggml's does.
TEST(GatedDeltaNet, ZeroHeadsStayFinite) {
  NetData d = net_data({1, 2, 32, 3}, 5);
  std::fill(d.qkv.begin(), d.qkv.begin() + 2 * 32, 0.0f);  // q and k of row 0
  CpuBackend be(1);
  auto state = d.state0;
  std::vector<float> out(size_t(3 * 2 * 32));
  run_net(be, d, 0, 3, state, out);
  const NetReference ref = reference(d);
  for (int j = 0; j < 2 * 32; ++j) EXPECT_EQ(out[size_t(j)], 0.0f) << j;
  expect_close(out, ref.out, 32, 1e-5, "out", &ref.out_mag);
  expect_close(state, ref.state, 32, 1e-5, "state");
}

TEST(GatedDeltaNet, RowsSplitOverCallsGiveTheSameBits) {
  for (SimdLevel level : supported_levels()) {
    CpuBackend be(2, level);
    for (const NetCase& c : {NetCase{2, 4, 128, 100}, NetCase{3, 6, 17, 100}, NetCase{1, 1, 64, 100}}) {
      SCOPED_TRACE(::testing::Message() << kernels::simd_level_name(level) << " d=" << c.d);
      const NetData d = net_data(c, 21);
      auto state = d.state0;
      std::vector<float> out(size_t(c.rows * c.nv * c.d));
      run_net(be, d, 0, c.rows, state, out);
      for (int64_t split : {1, 2, 37, 50, 99}) {
        auto state2 = d.state0;
        std::vector<float> out2(out.size());
        run_net(be, d, 0, split, state2, out2);
        run_net(be, d, split, c.rows, state2, out2);
        EXPECT_EQ(out2, out) << "split at " << split;
        EXPECT_EQ(state2, state) << "split at " << split;
      }
      auto state1 = d.state0;
      std::vector<float> out1(out.size());
      for (int64_t t = 0; t < c.rows; ++t) run_net(be, d, t, t + 1, state1, out1);
      EXPECT_EQ(out1, out);
      EXPECT_EQ(state1, state);
    }
  }
}

TEST(GatedDeltaNet, ThreadCountsAndRepeatsGiveTheSameBits) {
  CpuBackend one(1), two(2), three(3);
  for (const NetCase& c : {NetCase{3, 6, 128, 5}, NetCase{2, 4, 100, 100}, NetCase{1, 1, 32, 5}}) {
    SCOPED_TRACE(::testing::Message() << "d=" << c.d << " rows=" << c.rows);
    const NetData d = net_data(c, 31);
    auto state = d.state0;
    std::vector<float> out(size_t(c.rows * c.nv * c.d));
    run_net(one, d, 0, c.rows, state, out);
    for (CpuBackend* be : {&one, &two, &three}) {
      auto state2 = d.state0;
      std::vector<float> out2(out.size());
      run_net(*be, d, 0, c.rows, state2, out2);
      EXPECT_EQ(out2, out) << be->n_threads() << " threads";
      EXPECT_EQ(state2, state) << be->n_threads() << " threads";
    }
  }
}

// The SIMD levels sum in another order than the scalar one (ggml's helpers at each level): close, not equal.
TEST(GatedDeltaNet, SimdLevelsAgreeWithScalar) {
  const auto levels = supported_levels();
  if (levels.size() == 1) GTEST_SKIP() << "no SIMD level on this CPU";
  CpuBackend scalar(2, SimdLevel::kScalar);
  for (const NetCase& c : {NetCase{2, 4, 128, 100}, NetCase{3, 6, 64, 5}, NetCase{1, 1, 100, 100},
                           NetCase{1, 2, 200, 5}, NetCase{2, 2, 17, 5}}) {
    const NetData d = net_data(c, 41);
    auto want_state = d.state0;
    std::vector<float> want(size_t(c.rows * c.nv * c.d));
    run_net(scalar, d, 0, c.rows, want_state, want);
    const std::vector<double> want_d(want.begin(), want.end()),
        want_state_d(want_state.begin(), want_state.end());
    for (SimdLevel level : levels) {
      if (level == SimdLevel::kScalar) continue;
      SCOPED_TRACE(::testing::Message()
                   << kernels::simd_level_name(level) << " d=" << c.d << " rows=" << c.rows);
      CpuBackend simd(2, level);
      auto state = d.state0;
      std::vector<float> out(want.size());
      run_net(simd, d, 0, c.rows, state, out);
      expect_close(out, want_d, c.d, 1e-5, "out");
      expect_close(state, want_state_d, c.d, 1e-5, "state");
    }
  }
}

// ggml's helpers as ggml-cpu builds them, one lane at a time (the kernels use 8 at every level): lanes 0 is
// the build without GGML_SIMD, 8 the
// __AVX__ build (GGML_F32x8), 16 the __AVX512F__ one (GGML_F32x16, GCC's _mm512_reduce_add_ps).
float ggml_vec_dot(const float* x, const float* y, int64_t n, int lanes) {
  if (lanes == 0) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += double(x[i] * y[i]);
    return float(sum);
  }
  const int64_t step = 4 * lanes, np = n & ~(step - 1);
  float acc[4][16] = {};
  for (int64_t i = 0; i < np; i += step)
    for (int r = 0; r < 4; ++r)
      for (int l = 0; l < lanes; ++l)
        acc[r][l] = std::fma(x[i + r * lanes + l], y[i + r * lanes + l], acc[r][l]);
  float a[16];
  for (int l = 0; l < lanes; ++l) a[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  float sum;
  if (lanes == 8) {
    float t0[4];
    for (int l = 0; l < 4; ++l) t0[l] = a[l] + a[l + 4];
    sum = (t0[0] + t0[1]) + (t0[2] + t0[3]);
  } else {
    float t3[8], t6[4];
    for (int l = 0; l < 8; ++l) t3[l] = a[l + 8] + a[l];
    for (int l = 0; l < 4; ++l) t6[l] = t3[l + 4] + t3[l];
    sum = (t6[0] + t6[2]) + (t6[1] + t6[3]);
  }
  for (int64_t i = np; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

void ggml_vec_mad(float* y, const float* x, float v, int64_t n, int lanes) {
  const int64_t np = lanes == 0 ? 0 : n & ~int64_t(4 * lanes - 1);
  for (int64_t i = 0; i < np; ++i) y[i] = std::fma(x[i], v, y[i]);
  for (int64_t i = np; i < n; ++i) y[i] += x[i] * v;
}

// The kernels against ggml's order of operations (ops.cpp): vec_scale over the matrix, then per row the dot
// with k, mad, the dot with q. Bit for bit, at every supported level.
TEST(DeltaRuleKernel, IsGgmlsHelpersBitForBit) {
  for (SimdLevel level : supported_levels()) {
    const int lanes = 8;  // every level runs (or emulates) ggml's AVX order, so that levels agree bit for bit
    const kernels::DeltaRuleFn kernel = kernels::delta_rule_kernel(level);
    uint32_t seed = 50;
    for (int64_t d : {1, 8, 16, 31, 32, 33, 63, 64, 65, 100, 128, 130, 200, 256, 512}) {
      SCOPED_TRACE(::testing::Message() << kernels::simd_level_name(level) << " d=" << d);
      const auto S0 = normal(size_t(d * d), seed += 10, 0.0f, 0.3f);
      auto q = normal(size_t(d), seed + 1), k = normal(size_t(d), seed + 2);
      const auto v = normal(size_t(d), seed + 3);
      const float decay = 0.87f, beta = 0.3f, scale = 1.0f / std::sqrt(float(d));
      auto S = S0, want_S = S0;
      for (int step = 0; step < 3; ++step) {  // a few tokens on the same state
        std::vector<float> out(static_cast<size_t>(d)), want(static_cast<size_t>(d));
        kernel(S.data(), d, q.data(), k.data(), v.data(), decay, beta, scale, out.data());
        for (auto& s : want_S) s *= decay;
        for (int64_t j = 0; j < d; ++j) {
          float* row = want_S.data() + j * d;
          const float delta = (v[size_t(j)] - ggml_vec_dot(row, k.data(), d, lanes)) * beta;
          ggml_vec_mad(row, k.data(), delta, d, lanes);
          want[size_t(j)] = ggml_vec_dot(row, q.data(), d, lanes) * scale;
        }
        ASSERT_EQ(out, want);
        ASSERT_EQ(S, want_S);
        std::swap(q, k);
      }
    }
  }
}

TEST(GatedDeltaNet, RejectsBadShapesAndShortBuffers) {
  CpuBackend be(1);
  const NetData d = net_data({2, 4, 16, 3}, 61);
  auto state = d.state0;
  std::vector<float> out(size_t(3 * 4 * 16));
  auto with = [&](int nk, int nv, int hd) {
    DeltaNetParams p = d.params();
    p.n_k_heads = nk;
    p.n_v_heads = nv;
    p.head_dim = hd;
    std::vector<float> big(1 << 20), st(1 << 20), o(1 << 20);
    be.gated_delta_net(p, view(big), view(big), view(big), 1, view(st), view(o));
  };
  testing::expect_error([&] { with(2, 4, 0); }, {"head size 0", "out of range"});
  testing::expect_error([&] { with(1, 1, 513); }, {"head size 513", "out of range"});
  testing::expect_error([&] { with(2, 3, 16); }, {"multiple of key heads"});
  testing::expect_error([&] { with(4, 2, 16); }, {"multiple of key heads"});
  testing::expect_error([&] { with(0, 4, 16); }, {"multiple of key heads"});
  testing::expect_error([&] { with(2, 0, 16); }, {"multiple of key heads"});

  const size_t n_qkv = d.qkv.size(), n_a = d.alpha.size(), n_b = d.beta.size(), n_s = state.size(),
               n_o = out.size();
  auto call = [&](size_t qkv_n, size_t a_n, size_t b_n, size_t s_n, size_t o_n, size_t dt_n, size_t ssm_n) {
    DeltaNetParams p = d.params();
    p.dt_bias = cview(d.dt_bias, 0, dt_n);
    p.ssm_a = cview(d.ssm_a, 0, ssm_n);
    be.gated_delta_net(p, cview(d.qkv, 0, qkv_n), cview(d.alpha, 0, a_n), cview(d.beta, 0, b_n), 3,
                       mview(state, 0, s_n), mview(out, 0, o_n));
  };
  testing::expect_error([&] { call(n_qkv - 1, n_a, n_b, n_s, n_o, 4, 4); }, {"out of range"});
  testing::expect_error([&] { call(n_qkv, n_a - 1, n_b, n_s, n_o, 4, 4); }, {"out of range"});
  testing::expect_error([&] { call(n_qkv, n_a, n_b - 1, n_s, n_o, 4, 4); }, {"out of range"});
  testing::expect_error([&] { call(n_qkv, n_a, n_b, n_s - 1, n_o, 4, 4); }, {"out of range"});
  testing::expect_error([&] { call(n_qkv, n_a, n_b, n_s, n_o - 1, 4, 4); }, {"out of range"});
  testing::expect_error([&] { call(n_qkv, n_a, n_b, n_s, n_o, 3, 4); }, {"out of range"});
  testing::expect_error([&] { call(n_qkv, n_a, n_b, n_s, n_o, 4, 3); }, {"out of range"});
  EXPECT_EQ(state, d.state0);  // nothing ran
  call(n_qkv, n_a, n_b, n_s, n_o, 4, 4);
  EXPECT_NE(state, d.state0);
}

// ---- mul_sigmoid ----

// ggml_sigmoid (1 / (1 + expf(-g)) rounded to float) then ggml_mul: one product per value, bit for bit; a
// one-value gate broadcast over its row.
TEST(MulSigmoid, IsGgmlsSigmoidThenMulBitForBit) {
  CpuBackend be(2);
  const int64_t rows = 5, n = 37;
  const auto x0 = normal(size_t(rows * n), 71, 0.0f, 3.0f);
  for (int64_t gate_n : {int64_t{1}, n}) {
    SCOPED_TRACE(::testing::Message() << "gate_n=" << gate_n);
    auto gate = normal(size_t(rows * gate_n), 72, 0.0f, 4.0f);
    gate[0] = 100.0f;   // exp(-100) underflows: exactly 1
    gate[1] = -100.0f;  // exp(100) overflows: exactly 0
    auto x = x0;
    be.mul_sigmoid(view(x), view(gate), rows, n, gate_n);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const float g = gate[size_t(r * gate_n + (gate_n == 1 ? 0 : i))];
        const float want = 1.0f / (1.0f + std::exp(-g)) * x0[size_t(r * n + i)];
        ASSERT_EQ(x[size_t(r * n + i)], want) << r << " " << i;
      }
  }
}

TEST(MulSigmoid, RejectsOtherGateWidthsAndShortBuffers) {
  CpuBackend be(1);
  std::vector<float> x(3 * 8), gate(3 * 8);
  testing::expect_error([&] { be.mul_sigmoid(view(x), view(gate), 3, 8, 2); }, {"gate of 2 values"});
  testing::expect_error([&] { be.mul_sigmoid(mview(x, 0, 23), view(gate), 3, 8, 8); }, {"out of range"});
  testing::expect_error([&] { be.mul_sigmoid(view(x), cview(gate, 0, 23), 3, 8, 8); }, {"out of range"});
  testing::expect_error([&] { be.mul_sigmoid(view(x), cview(gate, 0, 2), 3, 8, 1); }, {"out of range"});
  be.mul_sigmoid(view(x), cview(gate, 0, 3), 3, 8, 1);
}

// ---- no allocation per call ----

TEST(DeltaNetOps, AllocateNothingPerCall) {
  CpuBackend be(3);
  const ConvCase cc{4, 600, 5};
  const ConvData cd = conv_data(cc, 81);
  auto conv_state = cd.state0;
  std::vector<float> y(cd.u.size());
  const NetData nd = net_data({2, 4, 128, 5}, 82);
  auto state = nd.state0;
  std::vector<float> out(size_t(5 * 4 * 128));
  std::vector<float> gate(y.size());
  auto run_all = [&] {
    run_conv(be, cc, cd, 0, cc.rows, conv_state, y);
    run_net(be, nd, 0, 5, state, out);
    be.mul_sigmoid(view(y), view(gate), cc.rows, cc.channels, cc.channels);
  };
  run_all();  // warm: the pool's threads are up
  const uint64_t before = g_allocations.load();
  for (int i = 0; i < 3; ++i) run_all();
  EXPECT_EQ(g_allocations.load(), before);
}

}  // namespace
}  // namespace df::backend

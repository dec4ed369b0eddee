// Every CPU backend op against a float64 reference on random inputs and several shapes (odd ones included
// where the op allows), plus the properties the models rely on: results independent of the batch split
// and of the thread count, and df::Error on misuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "argmax_rows.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernels/cpu_features.h"
#include "cpu_host_backend.h"
#include "quant/quant.h"
#include "random_data.h"
#include "util/error.h"

namespace df::backend {
namespace {

using df::testing::random_floats;

std::vector<float> dequantized(GgmlType t, const std::vector<uint8_t>& bytes, int64_t rows, int64_t n) {
  std::vector<float> out(static_cast<size_t>(rows * n));
  const size_t rb = ggml_row_bytes(t, n);
  for (int64_t r = 0; r < rows; ++r)
    quant::dequantize_row(t, bytes.data() + static_cast<size_t>(r) * rb, out.data() + r * n, n);
  return out;
}

std::vector<uint8_t> quantized(GgmlType t, const std::vector<float>& x, int64_t rows, int64_t n) {
  std::vector<uint8_t> out(ggml_row_bytes(t, n) * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    quant::quantize_row(t, x.data() + r * n, out.data() + static_cast<size_t>(r) * ggml_row_bytes(t, n), n);
  return out;
}

// ---- matmul ----

struct MatmulCase {
  GgmlType type;
  int64_t n_in;
};

void PrintTo(const MatmulCase& c, std::ostream* os) { *os << ggml_type_name(c.type) << " n_in=" << c.n_in; }

class Matmul : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(Matmul, MatchesFloat64ReferenceOnQuantizedActivations) {
  const auto [type, n_in] = GetParam();
  const int64_t n_out = 37;
  HostCpuBackend be(3);
  const auto wf = random_floats(static_cast<size_t>(n_in * n_out), 1);
  const auto wq = quantized(type, wf, n_out, n_in);
  const auto wd = dequantized(type, wq, n_out, n_in);
  const Weight w{type, wq.data(), n_in, n_out};

  for (int64_t rows : {1, 3, 5}) {
    const auto x = random_floats(static_cast<size_t>(rows * n_in), 2 + static_cast<uint32_t>(rows), 0.7f);
    std::vector<uint8_t> scratch(be.matmul_scratch_bytes(type, n_in, rows));
    std::vector<float> y(static_cast<size_t>(rows * n_out));
    be.matmul(w, x.data(), rows, y.data(), scratch);

    // The activation as the kernel sees it: converted to the vec_dot type and back.
    const GgmlType act = quant::vec_dot_type(type);
    std::vector<uint8_t> xq(ggml_row_bytes(act, n_in));
    std::vector<float> xd(static_cast<size_t>(n_in));
    for (int64_t r = 0; r < rows; ++r) {
      quant::quantize_activation(act, x.data() + r * n_in, xq.data(), n_in);
      quant::dequantize_row(act, xq.data(), xd.data(), n_in);
      for (int64_t o = 0; o < n_out; ++o) {
        double ref = 0, mag = 0, ref_f32 = 0, mag_f32 = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          const double wi = wd[static_cast<size_t>(o * n_in + i)];
          ref += wi * xd[static_cast<size_t>(i)];
          mag += std::abs(wi * xd[static_cast<size_t>(i)]);
          ref_f32 += wi * x[static_cast<size_t>(r * n_in + i)];
          mag_f32 += std::abs(wi * x[static_cast<size_t>(r * n_in + i)]);
        }
        const double got = y[static_cast<size_t>(r * n_out + o)];
        // Q4_1's min term uses Q8_1's block sum s stored as f16 (llama.cpp's numerics), 2^-11 relative.
        const double rel = type == GgmlType::Q4_1 ? 1e-3 : 1e-5;
        ASSERT_NEAR(got, ref, rel * mag + 1e-6)
            << ggml_type_name(type) << " rows=" << rows << " r=" << r << " o=" << o;
        // And close to the unquantized product: activation rounding stays below 8-bit precision.
        ASSERT_NEAR(got, ref_f32, 0.02 * mag_f32 + 1e-6) << ggml_type_name(type);
      }
    }
  }
}

// |kernel - reference| allowed for F16 rows (vec_dot.h): the reference sums the exact products sequentially
// in double, the SIMD kernels in double lanes.
double f16_dot_bound(const void* w_row, const void* act_row, int64_t n, float ref) {
  double mag = 0;
  for (int64_t i = 0; i < n; ++i)
    mag += std::abs(double(quant::fp16_to_fp32(static_cast<const uint16_t*>(w_row)[i])) *
                    quant::fp16_to_fp32(static_cast<const uint16_t*>(act_row)[i]));
  return std::ldexp(std::abs(double(ref)), -23) + 2.0 * double(n) * std::ldexp(mag, -53);
}

// Every element equals quant::vec_dot (the scalar reference) bit for bit: the SIMD kernels keep the
// reference's arithmetic for the quantized types. F16 is the documented exception, within its bound.
TEST_P(Matmul, EqualsScalarVecDotBitForBit) {
  const auto [type, n_in] = GetParam();
  const int64_t n_out = 13, rows = 2;
  const auto wq = quantized(type, random_floats(static_cast<size_t>(n_in * n_out), 17), n_out, n_in);
  const Weight w{type, wq.data(), n_in, n_out};
  const auto x = random_floats(static_cast<size_t>(rows * n_in), 18);
  HostCpuBackend be(2);
  std::vector<uint8_t> scratch(be.matmul_scratch_bytes(type, n_in, rows));
  std::vector<float> y(static_cast<size_t>(rows * n_out));
  be.matmul(w, x.data(), rows, y.data(), scratch);
  const GgmlType act = quant::vec_dot_type(type);
  std::vector<uint8_t> xq(ggml_row_bytes(act, n_in));
  for (int64_t r = 0; r < rows; ++r) {
    quant::quantize_activation(act, x.data() + r * n_in, xq.data(), n_in);
    for (int64_t o = 0; o < n_out; ++o) {
      const float ref = quant::vec_dot(type, w.row(o), xq.data(), n_in);
      const float got = y[static_cast<size_t>(r * n_out + o)];
      if (type == GgmlType::F16) {
        ASSERT_LE(std::abs(double(got) - ref), f16_dot_bound(w.row(o), xq.data(), n_in, ref)) << "r=" << r;
      } else {
        ASSERT_EQ(got, ref) << ggml_type_name(type) << " r=" << r << " o=" << o;
      }
    }
  }
}

// The SIMD level changes nothing but speed (F16 within its bound), here through the backend's tiling:
// 70 activation rows (two token tiles) against 150 output rows.
TEST_P(Matmul, SimdLevelGivesTheScalarLevelsResults) {
  const auto [type, n_in] = GetParam();
  const kernels::SimdLevel best = kernels::best_simd_level();
  if (best == kernels::SimdLevel::kScalar) GTEST_SKIP() << "no SIMD level on this CPU";
  const int64_t n_out = 150, rows = 70;
  const auto wq = quantized(type, random_floats(static_cast<size_t>(n_in * n_out), 27), n_out, n_in);
  const Weight w{type, wq.data(), n_in, n_out};
  const auto x = random_floats(static_cast<size_t>(rows * n_in), 28);
  HostCpuBackend scalar(2, kernels::SimdLevel::kScalar), simd(2, best);
  std::vector<uint8_t> scratch(scalar.matmul_scratch_bytes(type, n_in, rows));
  std::vector<float> want(static_cast<size_t>(rows * n_out)), got(want.size());
  scalar.matmul(w, x.data(), rows, want.data(), scratch);
  simd.matmul(w, x.data(), rows, got.data(), scratch);
  if (type != GgmlType::F16) {
    EXPECT_EQ(got, want);
    return;
  }
  std::vector<uint8_t> xq(ggml_row_bytes(GgmlType::F16, n_in));
  for (int64_t r = 0; r < rows; ++r) {
    quant::quantize_activation(GgmlType::F16, x.data() + r * n_in, xq.data(), n_in);
    for (int64_t o = 0; o < n_out; ++o) {
      const size_t at = static_cast<size_t>(r * n_out + o);
      ASSERT_LE(std::abs(double(got[at]) - want[at]), f16_dot_bound(w.row(o), xq.data(), n_in, want[at]));
    }
  }
}

// 70 rows is two token tiles, 150 outputs several row blocks: the split into tasks and their tiles never
// changes a bit, for any thread count, against one row at a time.
TEST_P(Matmul, RowsDoNotDependOnBatchOrThreads) {
  const auto [type, n_in] = GetParam();
  const int64_t n_out = 150, rows = 70;
  const auto wq = quantized(type, random_floats(static_cast<size_t>(n_in * n_out), 7), n_out, n_in);
  const Weight w{type, wq.data(), n_in, n_out};
  const auto x = random_floats(static_cast<size_t>(rows * n_in), 8);
  HostCpuBackend one(1), two(2), three(3);
  std::vector<uint8_t> scratch(one.matmul_scratch_bytes(type, n_in, rows));
  std::vector<float> batch(static_cast<size_t>(rows * n_out)), single(batch.size());
  one.matmul(w, x.data(), rows, batch.data(), scratch);
  for (HostCpuBackend* be : {&two, &three}) {
    std::vector<float> threaded(batch.size());
    be->matmul(w, x.data(), rows, threaded.data(), scratch);
    EXPECT_EQ(batch, threaded) << be->n_threads() << " threads";
  }
  for (int64_t r = 0; r < rows; ++r)
    two.matmul(w, x.data() + r * n_in, 1, single.data() + r * n_out, scratch);
  EXPECT_EQ(batch, single);
}

INSTANTIATE_TEST_SUITE_P(Types, Matmul,
                         ::testing::Values(MatmulCase{GgmlType::F32, 67}, MatmulCase{GgmlType::F16, 67},
                                           MatmulCase{GgmlType::BF16, 67}, MatmulCase{GgmlType::Q4_0, 96},
                                           MatmulCase{GgmlType::Q4_1, 96}, MatmulCase{GgmlType::Q8_0, 96},
                                           MatmulCase{GgmlType::MXFP4, 96}, MatmulCase{GgmlType::Q4_K, 512},
                                           MatmulCase{GgmlType::Q5_K, 512}, MatmulCase{GgmlType::Q6_K, 512}),
                         [](const auto& info) { return std::string(ggml_type_name(info.param.type)); });

TEST(Matmul, RejectsUnsupportedTypesAndShortScratch) {
  HostCpuBackend be(1);
  EXPECT_FALSE(be.supports_matmul(GgmlType::Q8_K));
  EXPECT_THROW(be.matmul_scratch_bytes(GgmlType::I32, 32, 1), Error);
  std::vector<uint8_t> w(ggml_row_bytes(GgmlType::Q8_0, 64) * 2);
  std::vector<float> x(64), y(2);
  std::vector<uint8_t> scratch(10);
  EXPECT_THROW(be.matmul(Weight{GgmlType::Q8_0, w.data(), 64, 2}, x.data(), 1, y.data(), scratch), Error);
}

TEST(GetRows, DequantizesRowsExactlyAndChecksIds) {
  HostCpuBackend be(1);
  const int64_t n = 256, vocab = 11;
  for (GgmlType t : {GgmlType::Q6_K, GgmlType::F16, GgmlType::Q4_0}) {
    const auto table = quantized(t, random_floats(static_cast<size_t>(n * vocab), 3), vocab, n);
    const auto all = dequantized(t, table, vocab, n);
    const std::vector<int32_t> ids = {4, 0, 10, 4};
    std::vector<float> out(ids.size() * n);
    const Weight w{t, table.data(), n, vocab};
    be.get_rows(w, ids, out.data());
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(out[i * n + static_cast<size_t>(j)], all[static_cast<size_t>(ids[i] * n + j)]);
    const std::vector<int32_t> bad = {11};
    EXPECT_THROW(be.get_rows(w, bad, out.data()), Error);
  }
}

TEST(GatherRows, CopiesTheRowsAskedInTheirOrderBitForBitAndChecksIds) {
  HostCpuBackend be(1);
  const int64_t width = 37, n_rows = 6;
  const auto table = random_floats(static_cast<size_t>(width * n_rows), 5);
  const std::vector<int32_t> ids = {5, 0, 2, 2, 4};
  std::vector<float> out(ids.size() * static_cast<size_t>(width), -1.0f);
  const auto t = CpuBackend::host(table.data(), table.size());
  be.gather_rows(t, width, CpuBackend::host(ids.data(), ids.size()), static_cast<int64_t>(ids.size()),
                 CpuBackend::host(out.data(), out.size()));
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(std::memcmp(out.data() + i * static_cast<size_t>(width),
                          table.data() + static_cast<size_t>(ids[i]) * static_cast<size_t>(width),
                          static_cast<size_t>(width) * sizeof(float)),
              0)
        << "row " << i;
  for (const int32_t bad : {6, -1}) {
    try {
      be.gather_rows(t, width, CpuBackend::host(&bad, 1), 1, CpuBackend::host(out.data(), out.size()));
      ADD_FAILURE() << "row " << bad << " was not refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("row " + std::to_string(bad) + " is outside a table of 6 rows"),
                std::string::npos)
          << e.what();
    }
  }
}

// ---- norms, RoPE ----

TEST(RmsNorm, MatchesFloat64ReferenceWithAndWithoutWeight) {
  HostCpuBackend be(1);
  for (int64_t n : {1, 64, 67, 256, 512}) {  // 256, 512: gemma4's per-head norms (V: no weight)
    const int64_t rows = 3;
    const auto x = random_floats(static_cast<size_t>(rows * n), 5, 3.0f);
    const auto w = random_floats(static_cast<size_t>(n), 6);
    for (bool weighted : {false, true}) {
      std::vector<float> y(x.size());
      be.rms_norm(x.data(), rows, n, weighted ? w.data() : nullptr, 1e-5f, y.data());
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) ss += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
        const double scale = 1.0 / std::sqrt(ss / double(n) + 1e-5);
        for (int64_t i = 0; i < n; ++i) {
          const double ref = x[size_t(r * n + i)] * scale * (weighted ? w[size_t(i)] : 1.0);
          ASSERT_NEAR(y[size_t(r * n + i)], ref, 1e-6 * (std::abs(ref) + 1e-3)) << "n=" << n;
        }
      }
      std::vector<float> in_place = x;  // y may alias x
      be.rms_norm(in_place.data(), rows, n, weighted ? w.data() : nullptr, 1e-5f, in_place.data());
      EXPECT_EQ(in_place, y);
    }
  }
}

// Rows go to threads whole, so a prefill chunk's norms are the one-thread bits (and in place too).
TEST(RmsNorm, RowsSplitOverThreadsGiveTheOneThreadBits) {
  HostCpuBackend one(1), four(4);
  const int64_t rows = 70, n = 2048;
  const auto x = random_floats(static_cast<size_t>(rows * n), 7, 3.0f);
  const auto w = random_floats(static_cast<size_t>(n), 8);
  std::vector<float> y1(x.size()), y4(x.size());
  one.rms_norm(x.data(), rows, n, w.data(), 1e-6f, y1.data());
  four.rms_norm(x.data(), rows, n, w.data(), 1e-6f, y4.data());
  EXPECT_EQ(y1, y4);
  std::vector<float> in_place = x;
  four.rms_norm(in_place.data(), rows, n, w.data(), 1e-6f, in_place.data());
  EXPECT_EQ(in_place, y1);
}

TEST(Rope, NeoxMatchesFloat64ReferenceAndLeavesUnrotatedDims) {
  HostCpuBackend be(1);
  const int n_head = 3, head_dim = 64;
  for (int n_rot : {64, 32}) {
    const std::vector<int32_t> pos = {0, 1, 17, 250};
    const int64_t rows = static_cast<int64_t>(pos.size());
    const auto x0 = random_floats(static_cast<size_t>(rows * n_head * head_dim), 9);
    auto x = x0;
    const float base = 1e6f;
    be.rope(x.data(), rows, n_head, head_dim, pos.data(), RopeParams{.n_rot = n_rot, .freq_base = base});
    for (int64_t r = 0; r < rows; ++r)
      for (int h = 0; h < n_head; ++h) {
        const size_t o = static_cast<size_t>((r * n_head + h) * head_dim);
        for (int i = 0; i < n_rot / 2; ++i) {
          const double theta = pos[size_t(r)] * std::pow(double(base), -2.0 * i / n_rot);
          const double a = x0[o + size_t(i)], b = x0[o + size_t(i + n_rot / 2)];
          // Float θ accumulates a relative error of ~i ulps; allow for it at the largest position.
          const double tol = 2e-4 * (std::abs(a) + std::abs(b)) + 1e-6;
          ASSERT_NEAR(x[o + size_t(i)], a * std::cos(theta) - b * std::sin(theta), tol);
          ASSERT_NEAR(x[o + size_t(i + n_rot / 2)], a * std::sin(theta) + b * std::cos(theta), tol);
        }
        for (int i = n_rot; i < head_dim; ++i) ASSERT_EQ(x[o + size_t(i)], x0[o + size_t(i)]);
      }
  }
}

// ---- attention ----

TEST(Attention, MatchesFloat64ReferenceOverTheF16CacheCausallyWithGqa) {
  const int n_head = 4, n_kv = 2, hd = 64, n_ctx = 12, rows = 9;
  HostCpuBackend be(3);
  const auto q = random_floats(size_t(rows * n_head * hd), 11);
  const auto k = random_floats(size_t(rows * n_kv * hd), 12, 0.5f);
  const auto v = random_floats(size_t(rows * n_kv * hd), 13);
  std::vector<uint16_t> kc(size_t(n_ctx * n_kv * hd)), vc(kc.size());
  const KvCacheView kv = host_kv(kc.data(), vc.data(), n_ctx, n_kv, hd);
  std::vector<float> scratch(be.attention_scratch_floats(n_ctx, hd));
  const float scale = 1.0f / 8.0f;
  // Batched: the first 2 rows, then the other 7 as one batch.
  std::vector<float> out(q.size());
  be.kv_store(kv, k.data(), v.data(), 2, 0);
  be.attention(kv, q.data(), 2, 0, AttentionParams{n_head, scale}, out.data(), scratch);
  be.kv_store(kv, k.data() + 2 * n_kv * hd, v.data() + 2 * n_kv * hd, rows - 2, 2);
  be.attention(kv, q.data() + 2 * n_head * hd, rows - 2, 2, AttentionParams{n_head, scale},
               out.data() + 2 * n_head * hd, scratch);

  const auto f16 = [](float f) { return double(quant::fp16_to_fp32(quant::fp32_to_fp16(f))); };
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < n_head; ++h) {
      const int kh = h / (n_head / n_kv);
      std::vector<double> s(size_t(r + 1));
      double mx = -1e300;
      for (int j = 0; j <= r; ++j) {
        double dot = 0;
        for (int d = 0; d < hd; ++d)
          dot += double(q[size_t((r * n_head + h) * hd + d)]) * f16(k[size_t((j * n_kv + kh) * hd + d)]);
        s[size_t(j)] = dot * scale;
        mx = std::max(mx, s[size_t(j)]);
      }
      double sum = 0;
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (int d = 0; d < hd; ++d) {
        double ref = 0, mag = 0;
        for (int j = 0; j <= r; ++j) {
          const double t = s[size_t(j)] / sum * f16(v[size_t((j * n_kv + kh) * hd + d)]);
          ref += t;
          mag += std::abs(t);
        }
        // Q and P are rounded to f16 (relative 2^-11 each).
        ASSERT_NEAR(out[size_t((r * n_head + h) * hd + d)], ref, 3e-3 * mag + 1e-6)
            << "r=" << r << " h=" << h;
      }
    }

  // The same rows decoded one at a time give identical bits.
  std::vector<float> step(q.size());
  for (int r = 0; r < rows; ++r) {
    be.kv_store(kv, k.data() + r * n_kv * hd, v.data() + r * n_kv * hd, 1, r);
    be.attention(kv, q.data() + r * n_head * hd, 1, r, AttentionParams{n_head, scale},
                 step.data() + r * n_head * hd, scratch);
  }
  EXPECT_EQ(step, out);
}

// Long enough (80 keys, 80 query rows) for the work to be split over the pool; any thread count gives the
// same bits.
TEST(Attention, ThreadsDoNotChangeResults) {
  const int n_head = 4, n_kv = 2, hd = 64, n_ctx = 80, rows = 80;
  const auto q = random_floats(size_t(rows * n_head * hd), 14);
  const auto k = random_floats(size_t(rows * n_kv * hd), 15, 0.5f);
  const auto v = random_floats(size_t(rows * n_kv * hd), 16);
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 3}) {
    HostCpuBackend be(threads);
    std::vector<uint16_t> kc(size_t(n_ctx * n_kv * hd)), vc(kc.size());
    const KvCacheView kv = host_kv(kc.data(), vc.data(), n_ctx, n_kv, hd);
    std::vector<float> scratch(be.attention_scratch_floats(n_ctx, hd)), out(q.size());
    be.kv_store(kv, k.data(), v.data(), rows, 0);
    be.attention(kv, q.data(), rows, 0, AttentionParams{n_head, 0.125f}, out.data(), scratch);
    outs.push_back(std::move(out));
  }
  EXPECT_EQ(outs[1], outs[0]);
  EXPECT_EQ(outs[2], outs[0]);
}

TEST(Attention, RejectsPositionsPastTheContext) {
  HostCpuBackend be(1);
  std::vector<uint16_t> kc(4 * 64), vc(4 * 64);
  const KvCacheView kv = host_kv(kc.data(), vc.data(), 4, 1, 64);
  std::vector<float> x(2 * 64), out(2 * 64), scratch(be.attention_scratch_floats(4, 64));
  EXPECT_THROW(be.kv_store(kv, x.data(), x.data(), 2, 3), Error);
  EXPECT_THROW(be.attention(kv, x.data(), 2, 3, AttentionParams{1, 1.0f}, out.data(), scratch), Error);
  const KvCacheView two_heads =
      host_kv(kc.data(), vc.data(), 4, 2, 32);  // 3 query heads cannot share 2 KV heads
  EXPECT_THROW(be.attention(two_heads, x.data(), 1, 0, AttentionParams{3, 1.0f}, out.data(), scratch), Error);
}

// ---- short conv ----

TEST(ShortConv, MatchesFloat64ReferenceAndCarriesItsState) {
  HostCpuBackend be(1);
  for (int L : {2, 3, 4}) {
    const int64_t n = 37, T = 6;
    const auto bcx = random_floats(size_t(T * 3 * n), 21);
    const auto w = random_floats(size_t(n * L), 22);
    const auto init = random_floats(size_t((L - 1) * n), 23);
    auto state = init;
    std::vector<float> y(size_t(T * n));
    be.short_conv(bcx.data(), T, n, w.data(), L, state.data(), y.data());
    for (int64_t ch = 0; ch < n; ++ch) {
      std::vector<double> z;  // the b⊙x history, oldest first
      for (int j = 0; j < L - 1; ++j) z.push_back(init[size_t(j * n + ch)]);
      for (int64_t t = 0; t < T; ++t) {
        const float* row = bcx.data() + t * 3 * n;
        z.push_back(double(row[ch]) * row[2 * n + ch]);
        double conv = 0;
        for (int j = 0; j < L; ++j)
          conv += double(w[size_t(ch * L + j)]) * z[z.size() - size_t(L) + size_t(j)];
        const double ref = row[n + ch] * conv;
        ASSERT_NEAR(y[size_t(t * n + ch)], ref, 1e-5 * (std::abs(ref) + 1)) << "L=" << L;
      }
      for (int j = 0; j < L - 1; ++j)
        ASSERT_NEAR(state[size_t(j * n + ch)], z[z.size() - size_t(L - 1) + size_t(j)],
                    1e-6 * (std::abs(z.back()) + 1));
    }
    // Two chunks (2 + 4 tokens) give the same outputs and state as one.
    auto state2 = init;
    std::vector<float> y2(y.size());
    be.short_conv(bcx.data(), 2, n, w.data(), L, state2.data(), y2.data());
    be.short_conv(bcx.data() + 2 * 3 * n, T - 2, n, w.data(), L, state2.data(), y2.data() + 2 * n);
    EXPECT_EQ(y2, y);
    EXPECT_EQ(state2, state);
  }
}

// The conv's float operations, one channel and token at a time in the obvious order: the sum starts at 0
// and takes w_j · h_j for the L - 1 history values oldest first, then w_last · (b·x), and c multiplies it.
// The backend vectorises along channels and splits them over threads; it must give exactly these bits.
void short_conv_reference(const std::vector<float>& bcx, int64_t T, int64_t n, const std::vector<float>& w,
                          int L, std::vector<float>& state, std::vector<float>& y) {
  for (int64_t ch = 0; ch < n; ++ch) {
    std::vector<float> hist;
    for (int j = 0; j < L - 1; ++j) hist.push_back(state[size_t(j * n + ch)]);
    for (int64_t t = 0; t < T; ++t) {
      const float* row = bcx.data() + t * 3 * n;
      const float z = row[ch] * row[2 * n + ch];
      float sum = 0.0f;
      for (int j = 0; j < L - 1; ++j) sum += w[size_t(ch * L + j)] * hist[size_t(j)];
      sum += w[size_t(ch * L + L - 1)] * z;
      y[size_t(t * n + ch)] = row[n + ch] * sum;
      hist.erase(hist.begin());
      hist.push_back(z);
    }
    for (int j = 0; j < L - 1; ++j) state[size_t(j * n + ch)] = hist[size_t(j)];
  }
}

TEST(ShortConv, BitIdenticalToTheScalarOrderForAnyThreadsAndChunks) {
  for (int threads : {1, 3, 4}) {
    HostCpuBackend be(threads);
    for (int L : {2, 3, 5})
      for (int64_t n : {int64_t{7}, int64_t{64}, int64_t{2048}})
        for (int64_t T : {int64_t{1}, int64_t{2}, int64_t{70}}) {
          const auto bcx = random_floats(size_t(T * 3 * n), 31);
          const auto w = random_floats(size_t(n * L), 32);
          auto state = random_floats(size_t((L - 1) * n), 33), ref_state = state;
          std::vector<float> y(size_t(T * n)), ref(y.size());
          be.short_conv(bcx.data(), T, n, w.data(), L, state.data(), y.data());
          short_conv_reference(bcx, T, n, w, L, ref_state, ref);
          ASSERT_EQ(y, ref) << "threads " << threads << " L " << L << " n " << n << " T " << T;
          ASSERT_EQ(state, ref_state) << "threads " << threads << " L " << L << " n " << n << " T " << T;
        }
  }
}

// ---- elementwise, routing ----

// scale and mul_rows are one float product per value (ggml_scale, ggml_mul broadcasting a row); softcap is
// llama.cpp's ggml_scale(1/cap), ggml_tanh, ggml_scale(cap): the reciprocal rounded to float, then three
// roundings (tanhf as ggml-cpu's op_tanh calls it). All bit for bit against those scalar operations.
TEST(Elementwise, ScaleMulRowsAndSoftcapAreGgmlsFloatOps) {
  HostCpuBackend be(1);
  const int64_t rows = 3, n = 37;
  const auto x0 = random_floats(static_cast<size_t>(rows * n), 33, 3.0f), w = random_floats(37, 34);
  const float s = std::sqrt(2816.0f);
  auto x = x0;
  be.scale(x.data(), rows * n, s);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], x0[i] * s) << i;
  x = x0;
  be.mul_rows(x.data(), w.data(), rows, n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(x[size_t(r * n + i)], x0[size_t(r * n + i)] * w[size_t(i)]) << r << " " << i;

  // Logits of a vocabulary (split over 3 threads), some far past the cap.
  const int64_t V = 100003;
  const float cap = 30.0f, r = 1.0f / cap;
  const auto logits = random_floats(static_cast<size_t>(V), 35, 40.0f);
  for (int threads : {1, 3}) {
    HostCpuBackend pool(threads);
    auto y = logits;
    pool.softcap(y.data(), V, cap);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(y[i], std::tanh(logits[i] * r) * cap) << i;
      ASSERT_LE(std::abs(y[i]), cap);
    }
  }
  std::vector<float> edge = {0.0f, -0.0f, 1e30f, -1e30f, 30.0f};
  be.softcap(edge.data(), 5, cap);
  EXPECT_EQ(edge[0], 0.0f);
  EXPECT_EQ(edge[2], cap);
  EXPECT_EQ(edge[3], -cap);
  EXPECT_NEAR(edge[4], 30.0 * std::tanh(1.0), 1e-5);
}

TEST(Elementwise, SwigluAndAddMatchFloat64) {
  HostCpuBackend be(1);
  const auto g = random_floats(101, 31, 4.0f), u = random_floats(101, 32);
  std::vector<float> y(101);
  be.swiglu(g.data(), u.data(), 101, y.data());
  for (size_t i = 0; i < y.size(); ++i) {
    const double ref = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
    ASSERT_NEAR(y[i], ref, 1e-6 * (std::abs(ref) + 1e-3));
  }
  auto x = g;
  be.add(x.data(), u.data(), 101);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], g[i] + u[i]);
}

TEST(Route, SigmoidWithSelectionBiasPicksTopKAndNormalisesUnbiasedWeights) {
  HostCpuBackend be(1);
  const int E = 24, K = 4, rows = 5;
  const auto logits = random_floats(size_t(rows * E), 41, 2.0f);
  const auto bias = random_floats(size_t(E), 42, 0.3f);
  RouterParams p;
  p.gating = Gating::Sigmoid;
  p.n_expert = E;
  p.k = K;
  p.selection_bias = HostCpuBackend::h(bias.data());
  std::vector<int32_t> ids(size_t(rows * K));
  std::vector<float> w(ids.size());
  be.route(p, logits.data(), rows, ids.data(), w.data());
  for (int r = 0; r < rows; ++r) {
    std::vector<double> prob(E), score(E);
    for (int e = 0; e < E; ++e) {
      prob[size_t(e)] = 1.0 / (1.0 + std::exp(-double(logits[size_t(r * E + e)])));
      score[size_t(e)] = prob[size_t(e)] + bias[size_t(e)];
    }
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return score[size_t(a)] > score[size_t(b)]; });
    double sum = 0;
    for (int j = 0; j < K; ++j) sum += prob[size_t(order[size_t(j)])];
    for (int j = 0; j < K; ++j) {
      ASSERT_EQ(ids[size_t(r * K + j)], order[size_t(j)]) << "row " << r << " slot " << j;
      ASSERT_NEAR(w[size_t(r * K + j)], prob[size_t(order[size_t(j)])] / sum, 1e-6);
    }
  }
}

TEST(Route, SoftmaxTiesScaleAndClamp) {
  HostCpuBackend be(1);
  RouterParams p;
  p.n_expert = 6;
  p.k = 2;
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  // Exact ties: the lowest ids win, in id order.
  const std::vector<float> flat(6, 0.5f);
  p.gating = Gating::Softmax;
  be.route(p, flat.data(), 1, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(w[0], 0.5, 1e-7);
  // Softmax probabilities, scale 2.5 applied after normalisation.
  const std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.5f, 0.0f, 0.3f};
  p.scale = 2.5f;
  be.route(p, l.data(), 1, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3}));
  const double e1 = std::exp(2.0), e3 = std::exp(1.5);
  EXPECT_NEAR(w[0], 2.5 * e1 / (e1 + e3), 1e-6);
  EXPECT_NEAR(w[1], 2.5 * e3 / (e1 + e3), 1e-6);
  // Sigmoid of very negative logits: the weight sum is clamped at 2^-14, so the weights stay tiny.
  p.gating = Gating::Sigmoid;
  p.scale = 1.0f;
  const std::vector<float> neg(6, -20.0f);
  be.route(p, neg.data(), 1, ids.data(), w.data());
  const double s = 1.0 / (1.0 + std::exp(20.0));
  EXPECT_NEAR(w[0], s / 6.103515625e-5, 1e-9);
  p.k = 7;
  EXPECT_THROW(be.route(p, neg.data(), 1, ids.data(), w.data()), Error);
}

TEST(MoeCombine, AddsTheWeightedSumInSlotOrderToTheResidual) {
  for (const auto& [threads, n] :
       {std::pair{1, int64_t{33}}, std::pair{4, int64_t{33}}, std::pair{4, int64_t{600}}}) {
    HostCpuBackend be(threads);
    const int rows = 3, K = 4;
    const auto e = random_floats(size_t(rows * K * n), 51);
    const auto w = random_floats(size_t(rows * K), 52);
    const auto x0 = random_floats(size_t(rows * n), 53);
    std::vector<float> x = x0;
    be.moe_combine_add(e.data(), w.data(), rows, K, n, x.data());
    for (int r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) {
        // The sum is formed first, in slot order, then added: float for float what the kernel must do.
        float sum = e[size_t(r * K * n + i)] * w[size_t(r * K)];
        double ref = 0, mag = 0;
        for (int j = 0; j < K; ++j) {
          const double t = double(w[size_t(r * K + j)]) * e[size_t((r * K + j) * n + i)];
          ref += t;
          mag += std::abs(t);
          if (j > 0) sum = sum + e[size_t((r * K + j) * n + i)] * w[size_t(r * K + j)];
        }
        const size_t at = size_t(r * n + i);
        ASSERT_EQ(x[at], x0[at] + sum);
        ASSERT_NEAR(x[at], x0[at] + ref, 1e-6 * (mag + std::abs(x0[at])) + 1e-9);
      }
  }
}

TEST(Argmax, EveryRowsFirstIndexOfItsGreatestValueAsTheScanGivesIt) {
  HostCpuBackend be(2);
  for (size_t n : {size_t{1}, size_t{2}, size_t{31}, size_t{1000}, size_t{4097}, size_t{65536}}) {
    const int rows = 9;
    const std::vector<float> x = df::testing::argmax_rows(rows, n, static_cast<uint32_t>(n));
    std::vector<int32_t> ids(rows, -1);
    be.argmax(CpuBackend::host(x.data(), x.size()), rows, static_cast<int64_t>(n),
              CpuBackend::host(ids.data(), ids.size()));
    for (int r = 0; r < rows; ++r)
      EXPECT_EQ(ids[static_cast<size_t>(r)],
                df::testing::scan_argmax(std::span(x.data() + static_cast<size_t>(r) * n, n)))
          << "row " << r << " of " << n << " values";
  }
  // The kinds' answers, spelt out for one size.
  const size_t n = 40;
  const std::vector<float> x = df::testing::argmax_rows(8, n, 7);
  std::vector<int32_t> ids(8, -1);
  be.argmax(CpuBackend::host(x.data(), x.size()), 8, static_cast<int64_t>(n),
            CpuBackend::host(ids.data(), 8));
  EXPECT_EQ(ids[1], 0);                            // the first value NaN
  EXPECT_EQ(ids[2], static_cast<int32_t>(n - 1));  // NaNs around the maximum
  EXPECT_EQ(ids[3], 0);                            // every value -inf
  EXPECT_EQ(ids[4], static_cast<int32_t>(n / 2));  // -0 before +0
  EXPECT_EQ(ids[5], static_cast<int32_t>(n - 1));  // +inf last
  EXPECT_EQ(ids[6], 0);                            // NaN after a finite first value
  EXPECT_EQ(x[static_cast<size_t>(ids[0])], 100.0f);
  for (int32_t i = 0; i < ids[0]; ++i) EXPECT_LT(x[static_cast<size_t>(i)], 100.0f);
}

TEST(ReadBack, QueuedBytesComeBackFromTheirSlot) {
  HostCpuBackend be(1);
  const std::vector<int32_t> v = {7, -3, 11, 42};
  for (int slot = 0; slot < Backend::kReadBackSlots; ++slot)
    be.queue_read_back(slot, CpuBackend::host(v.data() + slot, 1).bytes(), sizeof(int32_t));
  for (int slot = Backend::kReadBackSlots - 1; slot >= 0; --slot) {
    int32_t got = 0;
    be.read_back(slot, &got, sizeof got);
    EXPECT_EQ(got, v[static_cast<size_t>(slot)]);
  }
  EXPECT_THROW(be.queue_read_back(Backend::kReadBackSlots, CpuBackend::host(v.data(), 1).bytes(), 4),
               df::Error);
  int32_t big[32];
  EXPECT_THROW(be.read_back(0, big, sizeof big), df::Error);
}

}  // namespace
}  // namespace df::backend

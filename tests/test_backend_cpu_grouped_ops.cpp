// The CPU backend's grouped ops against the ops they group: matmul_many equals one matmul per product, and
// ffn (SwiGLU) equals gate and up matmuls, swiglu and the down matmul on the gathered rows, bit for bit, for
// any thread count; bad groups fail with df::Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cpu_host_backend.h"
#include "error_matchers.h"
#include "quant/q4_0x16.h"
#include "quant/quant.h"
#include "random_data.h"
#include "util/error.h"

namespace df::backend {
namespace {

using df::testing::random_floats;

// A random n_out × n_in matrix of type t (its bytes live in the returned vector).
struct Matrix {
  std::vector<uint8_t> bytes;
  Weight w;
  Matrix(GgmlType t, int64_t n_in, int64_t n_out, uint32_t seed) {
    const auto f = random_floats(static_cast<size_t>(n_in * n_out), seed, 0.5f);
    const size_t rb = ggml_row_bytes(t, n_in);
    bytes.resize(rb * static_cast<size_t>(n_out));
    for (int64_t r = 0; r < n_out; ++r)
      quant::quantize_row(t, f.data() + r * n_in, bytes.data() + static_cast<size_t>(r) * rb, n_in);
    w = Weight{t, bytes.data(), n_in, n_out};
  }
  // A copy repacked as Q4_0x16 (the loaders' choice for Q4_0 with whole 16-row groups).
  Matrix packed() const {
    Matrix m = *this;
    quant::pack_q4_0x16(bytes.data(), w.n_out, w.n_in, m.bytes.data());
    m.w = Weight{w.type, m.bytes.data(), w.n_in, w.n_out, quant::RowPacking::kQ4_0x16};
    return m;
  }
};

std::vector<float> matmul(HostCpuBackend& be, const Weight& w, const float* x, int64_t rows) {
  std::vector<uint8_t> scratch(be.matmul_scratch_bytes(w.type, w.n_in, rows));
  std::vector<float> y(static_cast<size_t>(rows * w.n_out));
  be.matmul(w, x, rows, y.data(), scratch);
  return y;
}

TEST(MatmulMany, EqualsOneMatmulPerProductWithSharedAndSeparateInputs) {
  const int64_t n_in = 256;
  const Matrix a(GgmlType::Q4_0, n_in, 300, 1), b(GgmlType::Q6_K, n_in, 70, 2), c(GgmlType::F16, n_in, 33, 3),
      d(GgmlType::Q4_0, n_in, 8, 4);
  for (int64_t rows : {1, 5, 70}) {
    const auto x1 = random_floats(static_cast<size_t>(rows * n_in), 10);
    const auto x2 = random_floats(static_cast<size_t>(rows * n_in), 11);
    HostCpuBackend one(1);
    const std::vector<std::vector<float>> want = {
        matmul(one, a.w, x1.data(), rows), matmul(one, b.w, x1.data(), rows),
        matmul(one, c.w, x2.data(), rows), matmul(one, d.w, x2.data(), rows)};
    for (int threads : {1, 2, 3}) {
      HostCpuBackend be(threads);
      std::vector<std::vector<float>> got(4);
      for (size_t i = 0; i < 4; ++i) got[i].assign(want[i].size(), -1.0f);
      // a and b share x1 (Q8_0 and Q8_K: two quantizations), d shares c's x2 in another format.
      const MatmulTask tasks[] = {{a.w, HostCpuBackend::h(x1.data()), HostCpuBackend::h(got[0].data())},
                                  {b.w, HostCpuBackend::h(x1.data()), HostCpuBackend::h(got[1].data())},
                                  {c.w, HostCpuBackend::h(x2.data()), HostCpuBackend::h(got[2].data())},
                                  {d.w, HostCpuBackend::h(x2.data()), HostCpuBackend::h(got[3].data())}};
      be.matmul_many(tasks, rows);
      for (size_t i = 0; i < 4; ++i)
        EXPECT_EQ(got[i], want[i]) << "product " << i << " rows " << rows << " threads " << threads;
    }
  }
}

// norm_matmul_many: xn and every product the bits of rms_norm then matmul_many, with and without a norm
// weight, packed weights among them; products that read other rows than xn, or rows of another length, are
// errors.
TEST(NormMatmulMany, IsRmsNormThenMatmulManyBitForBit) {
  const int64_t n = 256;
  const Matrix a(GgmlType::Q4_0, n, 48, 5), b(GgmlType::Q6_K, n, 70, 6);
  const Matrix a16 = a.packed();
  const auto norm = random_floats(static_cast<size_t>(n), 7, 1.0f);
  for (int64_t rows : {1, 3, 40}) {
    const auto x = random_floats(static_cast<size_t>(rows * n), 8 + static_cast<uint32_t>(rows), 2.0f);
    for (bool weighted : {true, false}) {
      const float* nw = weighted ? norm.data() : nullptr;
      HostCpuBackend be(2);
      std::vector<float> xn_want(x.size()), xn(x.size(), -1.0f);
      be.rms_norm(x.data(), rows, n, nw, 1e-6f, xn_want.data());
      const std::vector<std::vector<float>> want = {matmul(be, a.w, xn_want.data(), rows),
                                                    matmul(be, b.w, xn_want.data(), rows)};
      std::vector<std::vector<float>> got = {std::vector<float>(want[0].size(), -1.0f),
                                             std::vector<float>(want[1].size(), -1.0f)};
      const MatmulTask tasks[] = {{a16.w, HostCpuBackend::h(xn.data()), HostCpuBackend::h(got[0].data())},
                                  {b.w, HostCpuBackend::h(xn.data()), HostCpuBackend::h(got[1].data())}};
      be.norm_matmul_many(HostCpuBackend::h(x.data()), rows, n, HostCpuBackend::h(nw), 1e-6f,
                          HostCpuBackend::h(xn.data()), tasks);
      const std::string what = "rows " + std::to_string(rows) + (weighted ? ", weighted" : ", no weight");
      EXPECT_EQ(xn, xn_want) << what;
      EXPECT_EQ(got[0], want[0]) << what;
      EXPECT_EQ(got[1], want[1]) << what;
    }
  }
  HostCpuBackend be(1);
  const auto x = random_floats(static_cast<size_t>(n), 9);
  std::vector<float> xn(static_cast<size_t>(n)), other(static_cast<size_t>(n)), y(200);
  const MatmulTask reads_other[] = {{a.w, HostCpuBackend::h(xn.data()), HostCpuBackend::h(y.data())},
                                    {b.w, HostCpuBackend::h(other.data()), HostCpuBackend::h(y.data() + 48)}};
  df::testing::expect_error(
      [&] {
        be.norm_matmul_many(HostCpuBackend::h(x.data()), 1, n, HostCpuBackend::h(norm.data()), 1e-6f,
                            HostCpuBackend::h(xn.data()), reads_other);
      },
      {"norm_matmul_many: product 1 reads other rows than the normed ones"});
  const Matrix wide(GgmlType::Q4_0, 2 * n, 8, 10);
  const MatmulTask too_wide[] = {{wide.w, HostCpuBackend::h(xn.data()), HostCpuBackend::h(y.data())}};
  df::testing::expect_error(
      [&] {
        be.norm_matmul_many(HostCpuBackend::h(x.data()), 1, n, HostCpuBackend::h(norm.data()), 1e-6f,
                            HostCpuBackend::h(xn.data()), too_wide);
      },
      {"norm_matmul_many: product 0 takes rows of 512 values, the normed rows have 256"});
}

// Q4_0x16-packed weights give the unpacked weights' outputs bit for bit, through matmul and matmul_many, for
// any thread count and token count (one row block to several, one token tile to two).
TEST(PackedWeights, MatmulEqualsTheUnpackedMatmulBitForBit) {
  for (int64_t n_out : {16, 160, 2048}) {
    const int64_t n_in = n_out == 2048 ? 512 : 4160;  // 4160: rows longer than the kernels' 128-block chunk
    const Matrix m(GgmlType::Q4_0, n_in, n_out, static_cast<uint32_t>(n_out));
    const Matrix p = m.packed();
    for (int64_t rows : {1, 3, 70}) {
      const auto x = random_floats(static_cast<size_t>(rows * n_in), 5);
      HostCpuBackend one(1);
      const auto want = matmul(one, m.w, x.data(), rows);
      for (int threads : {1, 2, 3}) {
        HostCpuBackend be(threads);
        EXPECT_EQ(matmul(be, p.w, x.data(), rows), want)
            << n_out << " rows, " << rows << " tokens, " << threads;
        std::vector<float> y(want.size(), -1.0f), y2(want.size(), -1.0f);
        const MatmulTask tasks[] = {{p.w, HostCpuBackend::h(x.data()), HostCpuBackend::h(y.data())},
                                    {m.w, HostCpuBackend::h(x.data()), HostCpuBackend::h(y2.data())}};
        be.matmul_many(tasks, rows);
        EXPECT_EQ(y, want);
        EXPECT_EQ(y2, want);
      }
    }
  }
}

TEST(PackedWeights, RowLookupsAndMisfitPackingsAreRefused) {
  HostCpuBackend be(1);
  const Matrix m(GgmlType::Q4_0, 64, 32, 1);
  const Matrix p = m.packed();
  std::vector<float> out(64);
  const int32_t id = 3;
  EXPECT_THROW(be.get_rows(p.w, std::span(&id, 1), out.data()), Error);
  const auto x = random_floats(64, 2);
  Weight bad = m.w;
  bad.n_out = 24;  // not whole groups
  bad.packing = quant::RowPacking::kQ4_0x16;
  std::vector<uint8_t> scratch(be.matmul_scratch_bytes(bad.type, bad.n_in, 1));
  EXPECT_THROW(be.matmul(bad, x.data(), 1, out.data(), scratch), Error);
  const Matrix q8(GgmlType::Q8_0, 64, 32, 3);
  bad = q8.w;
  bad.packing = quant::RowPacking::kQ4_0x16;
  EXPECT_THROW(be.matmul(bad, x.data(), 1, out.data(), scratch), Error);
}

TEST(MatmulMany, RejectsTooManyProductsAndUnsupportedTypes) {
  HostCpuBackend be(2);
  const Matrix a(GgmlType::Q8_0, 32, 4, 5);
  std::vector<float> x(32), y(4);
  std::vector<MatmulTask> tasks(CpuBackend::kMaxMatmulTasks + 1,
                                MatmulTask{a.w, HostCpuBackend::h(x.data()), HostCpuBackend::h(y.data())});
  EXPECT_THROW(be.matmul_many(tasks, 1), Error);
  const MatmulTask bad[] = {{Weight{GgmlType::Q8_K, a.bytes.data(), 256, 1}, HostCpuBackend::h(x.data()),
                             HostCpuBackend::h(y.data())}};
  EXPECT_THROW(be.matmul_many(bad, 1), Error);
}

struct FfnTypes {
  GgmlType gate, up, down;
  int64_t n_in, n_ff, n_out;
};

void PrintTo(const FfnTypes& c, std::ostream* os) {
  *os << ggml_type_name(c.gate) << "/" << ggml_type_name(c.up) << "/" << ggml_type_name(c.down);
}

class SwigluFfn : public ::testing::TestWithParam<FfnTypes> {};

// Five experts over 9 tokens as a MoE layer routes them (one expert with no token, one with all), then
// one dense FFN over 70 rows (two token tiles).
TEST_P(SwigluFfn, EqualsMatmulSwigluMatmulOnTheGatheredRowsBitForBit) {
  const FfnTypes c = GetParam();
  const int64_t T = 9, K = 3;
  std::vector<Matrix> gates, ups, downs;
  for (uint32_t e = 0; e < 5; ++e) {
    gates.emplace_back(c.gate, c.n_in, c.n_ff, 100 + e);
    ups.emplace_back(c.up, c.n_in, c.n_ff, 200 + e);
    downs.emplace_back(c.down, c.n_ff, c.n_out, 300 + e);
  }
  // Entries (token, slot): expert of slot j of token t.
  std::vector<int32_t> expert_of(static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t) {
    expert_of[static_cast<size_t>(t * K)] = 0;                   // every token
    expert_of[static_cast<size_t>(t * K + 1)] = t % 2 ? 1 : 2;   // alternate
    expert_of[static_cast<size_t>(t * K + 2)] = t == 4 ? 1 : 3;  // expert 4: none
  }
  const auto x = random_floats(static_cast<size_t>(T * c.n_in), 7, 2.0f);

  // Reference: per expert, its rows gathered, matmul gate/up, swiglu, matmul down, scattered.
  HostCpuBackend one(1);
  std::vector<float> want(static_cast<size_t>(T * K * c.n_out), -1.0f);
  std::vector<std::vector<int32_t>> in_rows(5), out_rows(5);
  for (int64_t i = 0; i < T * K; ++i) {
    const size_t e = static_cast<size_t>(expert_of[static_cast<size_t>(i)]);
    in_rows[e].push_back(static_cast<int32_t>(i / K));
    out_rows[e].push_back(static_cast<int32_t>(i));
  }
  for (size_t e = 0; e < 5; ++e) {
    const int64_t n = static_cast<int64_t>(in_rows[e].size());
    if (n == 0) continue;
    std::vector<float> xg;
    for (int32_t r : in_rows[e]) xg.insert(xg.end(), x.begin() + r * c.n_in, x.begin() + (r + 1) * c.n_in);
    auto g = matmul(one, gates[e].w, xg.data(), n);
    const auto u = matmul(one, ups[e].w, xg.data(), n);
    one.swiglu(g.data(), u.data(), n * c.n_ff, g.data());
    const auto y = matmul(one, downs[e].w, g.data(), n);
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(y.begin() + i * c.n_out, c.n_out,
                  want.begin() + out_rows[e][static_cast<size_t>(i)] * c.n_out);
  }

  // Dense: one FFN over every row of a 70-row input (two token tiles).
  const int64_t rows = 70;
  const auto xd = random_floats(static_cast<size_t>(rows * c.n_in), 8, 2.0f);
  auto g = matmul(one, gates[0].w, xd.data(), rows);
  const auto u = matmul(one, ups[0].w, xd.data(), rows);
  one.swiglu(g.data(), u.data(), rows * c.n_ff, g.data());
  const auto dense_want = matmul(one, downs[0].w, g.data(), rows);
  FfnTask dense;
  dense.gate = gates[0].w;
  dense.up = ups[0].w;
  dense.down = downs[0].w;
  dense.n_rows = rows;

  for (int threads : {1, 2, 3}) {
    HostCpuBackend be(threads);
    std::vector<FfnTask> ffns;
    for (size_t e = 0; e < 5; ++e) {
      FfnTask f;
      f.gate = gates[e].w;
      f.up = ups[e].w;
      f.down = downs[e].w;
      f.in_rows = HostCpuBackend::h(in_rows[e].data());
      f.out_rows = HostCpuBackend::h(out_rows[e].data());
      f.n_rows = static_cast<int64_t>(in_rows[e].size());
      ffns.push_back(f);
    }
    std::vector<float> got(want.size(), -1.0f);
    be.ffn(ffns, ActivationParams{}, x.data(), T, got.data());
    EXPECT_EQ(got, want) << threads << " threads";
    if (c.gate == GgmlType::Q4_0) {
      // The same experts repacked (the store's layout): the same bits.
      std::vector<Matrix> packed;
      for (size_t e = 0; e < 5; ++e) {
        packed.push_back(gates[e].packed());
        packed.push_back(ups[e].packed());
        packed.push_back(downs[e].packed());
        ffns[e].gate = packed[3 * e].w;
        ffns[e].up = packed[3 * e + 1].w;
        ffns[e].down = packed[3 * e + 2].w;
      }
      std::vector<float> got_packed(want.size(), -1.0f);
      be.ffn(ffns, ActivationParams{}, x.data(), T, got_packed.data());
      EXPECT_EQ(got_packed, want) << threads << " threads, packed";
    }

    std::vector<float> dense_got(dense_want.size());
    be.ffn(std::span(&dense, 1), ActivationParams{}, xd.data(), rows, dense_got.data());
    EXPECT_EQ(dense_got, dense_want) << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, SwigluFfn,
    ::testing::Values(FfnTypes{GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0, 256, 160, 256},
                      // K-quants: the down input is Q8_K, quantized per 256-value block of n_ff.
                      FfnTypes{GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K, 256, 512, 64},
                      // Gate and up in different activation formats (Q8_0, Q8_1).
                      FfnTypes{GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::MXFP4, 64, 96, 40},
                      FfnTypes{GgmlType::F16, GgmlType::F16, GgmlType::F16, 64, 72, 40}),
    [](const auto& info) {
      std::string s(ggml_type_name(info.param.gate));
      s.append("_").append(ggml_type_name(info.param.up)).append("_").append(ggml_type_name(info.param.down));
      return s;
    });

TEST(SwigluFfnErrors, MismatchedShapesAndInputRowsOutOfRange) {
  HostCpuBackend be(2);
  const Matrix g(GgmlType::Q8_0, 64, 32, 1), u(GgmlType::Q8_0, 64, 32, 2), d(GgmlType::Q8_0, 32, 64, 3),
      other_down(GgmlType::Q8_0, 32, 32, 4);
  const auto x = random_floats(2 * 64, 5);
  std::vector<float> out(2 * 64);
  const int32_t rows[] = {0, 2};
  FfnTask a;
  a.gate = g.w;
  a.up = u.w;
  a.down = d.w;
  a.in_rows = HostCpuBackend::h(rows);
  a.n_rows = 2;
  EXPECT_THROW(be.ffn(std::span(&a, 1), ActivationParams{}, x.data(), 2, out.data()), Error);  // row 2 of 2
  a.n_rows = 1;
  FfnTask b = a;
  b.down = other_down.w;
  const FfnTask both[] = {a, b};
  EXPECT_THROW(be.ffn(both, ActivationParams{}, x.data(), 2, out.data()), Error);
  EXPECT_NO_THROW(be.ffn(std::span(&a, 1), ActivationParams{}, x.data(), 2, out.data()));
}

// The activations in float, as the backend documents them (the scalar reference of the fused path).
float reference_activation(const ActivationParams& act, float g, float u) {
  switch (act.kind) {
    case Activation::SwiGLU:
      return g / (1.0f + std::exp(-g)) * u;
    case Activation::GeGLU: {  // ggml_vec_geglu_f32 over ggml's f16 GELU table (FMA builds)
      if (g <= -10.0f) return 0.0f;
      if (g >= 10.0f) return g * u;
      const float h = quant::fp16_to_fp32(quant::fp32_to_fp16(g));
      const float r =
          0.5f * h *
          (1.0f + std::tanh(0.79788456080286535587989211986876f * h * std::fma(0.044715f * h, h, 1.0f)));
      return quant::fp16_to_fp32(quant::fp32_to_fp16(r)) * u;
    }
    case Activation::OaiSwiGLU: {
      const float x = std::min(g, act.limit), y = std::max(std::min(u, act.limit), -act.limit);
      return x / (1.0f + std::exp(act.alpha * -x)) * (y + 1.0f);
    }
  }
  return 0;
}

// Experts with biases, an output scale and each activation: the fused ffn() equals matmul, add_bias_rows, the
// activation, matmul, add_bias_rows and the scale applied one after the other, bit for bit, on 1-3 threads.
TEST(Ffn, BiasesScaleAndEveryActivationEqualTheUnfusedOps) {
  const int64_t n_in = 64, n_ff = 96, n_out = 40, T = 6;
  const Matrix g(GgmlType::Q8_0, n_in, n_ff, 1), u(GgmlType::MXFP4, n_in, n_ff, 2),
      d(GgmlType::Q4_0, n_ff, n_out, 3);
  const auto x = random_floats(static_cast<size_t>(T * n_in), 4, 2.0f);
  const auto gb = random_floats(static_cast<size_t>(n_ff), 5),
             ub = random_floats(static_cast<size_t>(n_ff), 6);
  const auto db = random_floats(static_cast<size_t>(n_out), 7);
  const std::vector<int32_t> in_rows = {4, 1, 5}, out_rows = {2, 0, 1};
  for (const ActivationParams act :
       {ActivationParams{Activation::SwiGLU}, ActivationParams{Activation::GeGLU},
        ActivationParams{Activation::OaiSwiGLU, 1.702f, 7.0f}}) {
    SCOPED_TRACE(static_cast<int>(act.kind));
    HostCpuBackend one(1);
    std::vector<float> xg;
    for (int32_t r : in_rows) xg.insert(xg.end(), x.begin() + r * n_in, x.begin() + (r + 1) * n_in);
    const int64_t n = static_cast<int64_t>(in_rows.size());
    auto gate = matmul(one, g.w, xg.data(), n), up = matmul(one, u.w, xg.data(), n);
    one.add_bias_rows(gate.data(), gb.data(), n, n_ff);
    one.add_bias_rows(up.data(), ub.data(), n, n_ff);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = reference_activation(act, gate[i], up[i]);
    auto down = matmul(one, d.w, gate.data(), n);
    one.add_bias_rows(down.data(), db.data(), n, n_out);
    std::vector<float> want(static_cast<size_t>(3 * n_out));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < n_out; ++o)
        want[static_cast<size_t>(out_rows[static_cast<size_t>(i)] * n_out + o)] =
            down[static_cast<size_t>(i * n_out + o)] * 0.5f;
    for (int threads : {1, 2, 3}) {
      HostCpuBackend be(threads);
      FfnTask f;
      f.gate = g.w;
      f.up = u.w;
      f.down = d.w;
      f.gate_bias = HostCpuBackend::h(gb.data());
      f.up_bias = HostCpuBackend::h(ub.data());
      f.down_bias = HostCpuBackend::h(db.data());
      f.out_scale = 0.5f;
      f.in_rows = HostCpuBackend::h(in_rows.data());
      f.out_rows = HostCpuBackend::h(out_rows.data());
      f.n_rows = n;
      std::vector<float> got(want.size(), -1.0f);
      be.ffn(std::span(&f, 1), act, x.data(), T, got.data());
      EXPECT_EQ(got, want) << threads << " threads";
    }
  }
}

// The activations against float64 formulas (ARCHITECTURES.md 1.3), fed exact (g, u) pairs: F32 gate and up
// rows of zeros whose biases carry the values, and an F32 identity as down.
TEST(Ffn, ActivationsFollowTheirDefinitions) {
  const std::vector<float> gs = {-12.0f, -3.0f, 0.0f, 1.5f, 6.9f, 7.0f, 12.0f, -0.25f};
  const std::vector<float> us = {0.5f, 3.0f, -1.0f, 2.0f, 9.0f, -9.0f, 7.5f, 1.0f};
  const int64_t n = static_cast<int64_t>(gs.size());
  std::vector<float> zeros(static_cast<size_t>(n), 0.0f), eye(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) eye[static_cast<size_t>(i * n + i)] = 1.0f;
  const Weight gate{GgmlType::F32, zeros.data(), 1, n}, up{GgmlType::F32, zeros.data(), 1, n},
      down{GgmlType::F32, eye.data(), n, n};
  const float x = 1.0f;
  HostCpuBackend be(2);
  for (const ActivationParams act :
       {ActivationParams{Activation::SwiGLU}, ActivationParams{Activation::GeGLU},
        ActivationParams{Activation::OaiSwiGLU, 1.702f, 7.0f}}) {
    FfnTask f;
    f.gate = gate;
    f.up = up;
    f.down = down;
    f.gate_bias = HostCpuBackend::h(gs.data());
    f.up_bias = HostCpuBackend::h(us.data());
    f.n_rows = 1;
    std::vector<float> y(static_cast<size_t>(n));
    be.ffn(std::span(&f, 1), act, &x, 1, y.data());
    for (size_t i = 0; i < gs.size(); ++i) {
      const double g = gs[i], u = us[i];
      double want = 0, tol = 1e-5;
      if (act.kind == Activation::SwiGLU) want = g / (1 + std::exp(-g)) * u;
      if (act.kind == Activation::OaiSwiGLU) {
        const double c = std::min(g, 7.0), v = std::clamp(u, -7.0, 7.0);
        want = c / (1 + std::exp(-1.702 * c)) * (v + 1);
      }
      if (act.kind == Activation::GeGLU) {
        want =
            g <= -10 ? 0
            : g >= 10
                ? g * u
                : 0.5 * g * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * g * (1 + 0.044715 * g * g))) * u;
        tol = 2e-3;  // the f16 table of ggml's CPU GELU
      }
      EXPECT_NEAR(y[i], want, tol * std::max(1.0, std::abs(want)))
          << "activation " << static_cast<int>(act.kind) << " g " << g << " u " << u;
    }
  }
}

// GeGLU is ggml's CPU GeGLU bit for bit over every f16 input: (g, u = 1) pairs fed as in the test above, 256
// at a time, for each f16 value g (0 for the infinities and NaNs); the outputs (+0.0f, so that a -0 reads as
// 0) hashed with FNV-1a 64 over their f32 bits. The hash is what llama.cpp v0.4.0's libggml-cpu-zen4.so (the
// golden fixtures' build; haswell's gives the same) computes for ggml_geglu_split on those inputs; its
// non-FMA builds (x64, sse42) give 0xcfe873e047516fe0, differing in the one entry checked below.
TEST(Ffn, GegluIsGgmlsF16GeluTableBitForBit) {
  const int64_t n = 256;
  std::vector<float> zeros(static_cast<size_t>(n), 0.0f), ones(static_cast<size_t>(n), 1.0f),
      eye(static_cast<size_t>(n * n), 0.0f), gs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) eye[static_cast<size_t>(i * n + i)] = 1.0f;
  const Weight zero{GgmlType::F32, zeros.data(), 1, n}, down{GgmlType::F32, eye.data(), n, n};
  HostCpuBackend be(2);
  const float x = 1.0f;
  uint64_t hash = 0xcbf29ce484222325ull;
  std::vector<float> y(static_cast<size_t>(n)), all;
  for (uint32_t c = 0; c < 65536; c += static_cast<uint32_t>(n)) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = quant::fp16_to_fp32(static_cast<uint16_t>(c + static_cast<uint32_t>(i)));
      gs[static_cast<size_t>(i)] = std::isfinite(g) ? g : 0.0f;
    }
    FfnTask f;
    f.gate = zero;
    f.up = zero;
    f.down = down;
    f.gate_bias = HostCpuBackend::h(gs.data());
    f.up_bias = HostCpuBackend::h(ones.data());
    f.n_rows = 1;
    be.ffn(std::span(&f, 1), ActivationParams{Activation::GeGLU}, &x, 1, y.data());
    for (float v : y) {
      v += 0.0f;
      uint32_t b;
      std::memcpy(&b, &v, 4);
      for (int k = 0; k < 4; ++k) {
        hash ^= (b >> (8 * k)) & 0xFF;
        hash *= 0x100000001b3ull;
      }
      all.push_back(v);
    }
  }
  EXPECT_EQ(hash, 0x755ea7de8ef30780ull);
  // f16 0xBFFF = -1.9990234375: 1 + A·h·h rounded apart and then added (no FMA) would give 0xA9D2.
  EXPECT_EQ(all[0xBFFF], quant::fp16_to_fp32(0xA9D3));
  ASSERT_EQ(quant::fp16_to_fp32(0xC900), -10.0f);
  EXPECT_EQ(all[0xC900], 0.0f) << "g = -10 and below: 0";
  EXPECT_EQ(all[0x4900], 10.0f) << "g = 10 and above: g · u";
}

// routed_ffn: every (token, slot) row is the ffn() of its expert on its token, bit for bit, with per-expert
// biases taken from the stacks' tables; an id out of range is an error naming it.
TEST(RoutedFfn, EveryRowIsItsExpertsFfnBitForBit) {
  const int64_t n_in = 64, n_ff = 96, n_out = 40, T = 5, E = 6;
  const int k = 3;
  const size_t gate_slab = ggml_row_bytes(GgmlType::Q8_0, n_in) * n_ff,
               down_slab = ggml_row_bytes(GgmlType::Q4_0, n_ff) * n_out;
  std::vector<Matrix> g, u, d;
  std::vector<uint8_t> gs, us, ds;
  for (int e = 0; e < E; ++e) {
    g.emplace_back(GgmlType::Q8_0, n_in, n_ff, 10 + e);
    u.emplace_back(GgmlType::Q8_0, n_in, n_ff, 20 + e);
    d.emplace_back(GgmlType::Q4_0, n_ff, n_out, 30 + e);
    gs.insert(gs.end(), g.back().bytes.begin(), g.back().bytes.end());
    us.insert(us.end(), u.back().bytes.begin(), u.back().bytes.end());
    ds.insert(ds.end(), d.back().bytes.begin(), d.back().bytes.end());
  }
  const auto x = random_floats(static_cast<size_t>(T * n_in), 4, 2.0f);
  const auto gb = random_floats(static_cast<size_t>(E * n_ff), 5),
             ub = random_floats(static_cast<size_t>(E * n_ff), 6),
             db = random_floats(static_cast<size_t>(E * n_out), 7);
  const std::vector<int32_t> ids = {5, 0, 2, 2, 5, 1, 0, 3, 4, 4, 1, 5, 3, 2, 0};  // T x k
  RoutedExperts ex;
  ex.gate = {Weight{GgmlType::Q8_0, gs.data(), n_in, n_ff}, gate_slab};
  ex.up = {Weight{GgmlType::Q8_0, us.data(), n_in, n_ff}, gate_slab};
  ex.down = {Weight{GgmlType::Q4_0, ds.data(), n_ff, n_out}, down_slab};
  ex.n_expert = static_cast<int>(E);
  ex.gate_bias = HostCpuBackend::h(gb.data());
  ex.up_bias = HostCpuBackend::h(ub.data());
  ex.down_bias = HostCpuBackend::h(db.data());
  const ActivationParams act{Activation::OaiSwiGLU, 1.702f, 7.0f};
  HostCpuBackend be(2);
  std::vector<float> got(static_cast<size_t>(T * k * n_out), -1.0f);
  be.routed_ffn(ex, act, HostCpuBackend::h(ids.data()), T, k, HostCpuBackend::h(x.data()),
                HostCpuBackend::h(got.data()));
  for (int64_t i = 0; i < T * k; ++i) {
    const int e = ids[static_cast<size_t>(i)];
    const int32_t token = static_cast<int32_t>(i / k);
    FfnTask f;
    f.gate = g[static_cast<size_t>(e)].w;
    f.up = u[static_cast<size_t>(e)].w;
    f.down = d[static_cast<size_t>(e)].w;
    f.gate_bias = HostCpuBackend::h(gb.data() + e * n_ff);
    f.up_bias = HostCpuBackend::h(ub.data() + e * n_ff);
    f.down_bias = HostCpuBackend::h(db.data() + e * n_out);
    f.in_rows = HostCpuBackend::h(&token);
    f.n_rows = 1;
    std::vector<float> want(static_cast<size_t>(n_out));
    be.ffn(std::span(&f, 1), act, x.data(), T, want.data());
    EXPECT_EQ(std::vector<float>(got.begin() + i * n_out, got.begin() + (i + 1) * n_out), want)
        << "entry " << i;
  }
  // Through an expert->slot map (a device tier's): expert e's matrices are the stacks' slot_of[e]-th, its
  // biases still the e-th rows.
  const std::vector<int32_t> slot_of = {2, 3, 4, 5, 0, 1};
  RoutedExperts mapped = ex;
  mapped.slot_of = HostCpuBackend::h(slot_of.data());
  std::vector<float> got_mapped(got.size(), -1.0f);
  be.routed_ffn(mapped, act, HostCpuBackend::h(ids.data()), T, k, HostCpuBackend::h(x.data()),
                HostCpuBackend::h(got_mapped.data()));
  for (int64_t i = 0; i < T * k; ++i) {
    const int e = ids[static_cast<size_t>(i)];
    const size_t s = static_cast<size_t>(slot_of[static_cast<size_t>(e)]);
    const int32_t token = static_cast<int32_t>(i / k);
    FfnTask f;
    f.gate = g[s].w;
    f.up = u[s].w;
    f.down = d[s].w;
    f.gate_bias = HostCpuBackend::h(gb.data() + e * n_ff);
    f.up_bias = HostCpuBackend::h(ub.data() + e * n_ff);
    f.down_bias = HostCpuBackend::h(db.data() + e * n_out);
    f.in_rows = HostCpuBackend::h(&token);
    f.n_rows = 1;
    std::vector<float> want(static_cast<size_t>(n_out));
    be.ffn(std::span(&f, 1), act, x.data(), T, want.data());
    EXPECT_EQ(std::vector<float>(got_mapped.begin() + i * n_out, got_mapped.begin() + (i + 1) * n_out), want)
        << "mapped entry " << i;
  }
  std::vector<int32_t> bad = ids;
  bad[7] = static_cast<int32_t>(E);
  df::testing::expect_error(
      [&] {
        be.routed_ffn(ex, act, HostCpuBackend::h(bad.data()), T, k, HostCpuBackend::h(x.data()),
                      HostCpuBackend::h(got.data()));
      },
      {"expert id 6 is out of range (6 experts)"});
}

// The per-expert output scale (gemma4's ffn_down_exps.scale): routed_ffn with down_scale gives each row what
// ffn() gives with out_scale = down_scale[expert], bit for bit; GeGLU experts as gemma4's.
TEST(RoutedFfn, DownScaleIsTheExpertsOutScaleBitForBit) {
  const int64_t n_in = 64, n_ff = 64, n_out = 32, T = 4, E = 5;
  const int k = 2;
  const size_t gate_slab = ggml_row_bytes(GgmlType::Q4_0, n_in) * n_ff,
               down_slab = ggml_row_bytes(GgmlType::Q4_0, n_ff) * n_out;
  std::vector<Matrix> g, u, d;
  std::vector<uint8_t> gs, us, ds;
  for (int e = 0; e < E; ++e) {
    g.emplace_back(GgmlType::Q4_0, n_in, n_ff, 40 + e);
    u.emplace_back(GgmlType::Q4_0, n_in, n_ff, 50 + e);
    d.emplace_back(GgmlType::Q4_0, n_ff, n_out, 60 + e);
    gs.insert(gs.end(), g.back().bytes.begin(), g.back().bytes.end());
    us.insert(us.end(), u.back().bytes.begin(), u.back().bytes.end());
    ds.insert(ds.end(), d.back().bytes.begin(), d.back().bytes.end());
  }
  const auto x = random_floats(static_cast<size_t>(T * n_in), 8, 2.0f);
  const std::vector<float> scales = {0.75f, 1.0f, 2.5f, -0.3f, 1.0e-3f};
  const std::vector<int32_t> ids = {3, 0, 2, 3, 4, 1, 0, 2};  // T x k
  RoutedExperts ex;
  ex.gate = {Weight{GgmlType::Q4_0, gs.data(), n_in, n_ff}, gate_slab};
  ex.up = {Weight{GgmlType::Q4_0, us.data(), n_in, n_ff}, gate_slab};
  ex.down = {Weight{GgmlType::Q4_0, ds.data(), n_ff, n_out}, down_slab};
  ex.n_expert = static_cast<int>(E);
  ex.down_scale = HostCpuBackend::h(scales.data());
  const ActivationParams act{Activation::GeGLU};
  HostCpuBackend be(2);
  std::vector<float> got(static_cast<size_t>(T * k * n_out), -1.0f), unscaled(got.size());
  be.routed_ffn(ex, act, HostCpuBackend::h(ids.data()), T, k, HostCpuBackend::h(x.data()),
                HostCpuBackend::h(got.data()));
  RoutedExperts plain = ex;
  plain.down_scale = {};
  be.routed_ffn(plain, act, HostCpuBackend::h(ids.data()), T, k, HostCpuBackend::h(x.data()),
                HostCpuBackend::h(unscaled.data()));
  for (int64_t i = 0; i < T * k; ++i) {
    const int e = ids[static_cast<size_t>(i)];
    const int32_t token = static_cast<int32_t>(i / k);
    FfnTask f;
    f.gate = g[static_cast<size_t>(e)].w;
    f.up = u[static_cast<size_t>(e)].w;
    f.down = d[static_cast<size_t>(e)].w;
    f.out_scale = scales[static_cast<size_t>(e)];
    f.in_rows = HostCpuBackend::h(&token);
    f.n_rows = 1;
    std::vector<float> want(static_cast<size_t>(n_out));
    be.ffn(std::span(&f, 1), act, x.data(), T, want.data());
    EXPECT_EQ(std::vector<float>(got.begin() + i * n_out, got.begin() + (i + 1) * n_out), want)
        << "entry " << i;
    for (int64_t o = 0; o < n_out; ++o)  // the scale is one float product on the unscaled output
      ASSERT_EQ(got[static_cast<size_t>(i * n_out + o)],
                unscaled[static_cast<size_t>(i * n_out + o)] * scales[static_cast<size_t>(e)]);
  }
}

}  // namespace
}  // namespace df::backend

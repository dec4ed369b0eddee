// The host's copy of the CUDA routed kernels' arithmetic (--cpu-misses): the SIMD path equals the scalar
// reference bit for bit, the packings give the same values, the activation quantization is ggml's reference,
// the portable exp is accurate, thread counts change nothing, and the whole expert computes the FFN. That the
// reference is the GPU's order is shown on a GPU (test_backend_cuda_ops, RoutedFfnAddWithHostExperts...).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/kernels/cpu_features.h"
#include "backend/cuda_host/warp_order.h"
#include "quant/portable_exp.h"
#include "quant/q4_0x16.h"
#include "quant/quant.h"
#include "random_data.h"

namespace df::backend::cuda_host {
namespace {

using df::testing::quantized_rows;
using df::testing::random_floats;

std::vector<uint8_t> packed(const std::vector<uint8_t>& rows, int64_t n_out, int64_t n_in) {
  std::vector<uint8_t> out(rows.size());
  quant::pack_q4_0x16(rows.data(), n_out, n_in, out.data());
  return out;
}

struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
  explicit Quantized(const std::vector<float>& x) : q(x.size()), d(x.size() / 32), sum(x.size() / 32) {
    quantize_row_as_device(x.data(), static_cast<int64_t>(x.size()), row());
  }
  QuantizedRow row() { return {q.data(), d.data(), sum.data()}; }
};

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(PortableExp, WithinTwoUlpOfExpAndExactAtItsLimits) {
  int worst = 0;
  for (float x = -86.0f; x <= 88.7f; x += 0.001953125f) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    const int ulp = std::abs(static_cast<int>(bits(quant::portable_expf(x))) - static_cast<int>(bits(want)));
    worst = std::max(worst, ulp);
  }
  EXPECT_LE(worst, 2);
  EXPECT_EQ(quant::portable_expf(0.0f), 1.0f);
  EXPECT_EQ(quant::portable_expf(-100.0f), 0.0f);
  EXPECT_EQ(quant::portable_expf(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(quant::portable_expf(std::numeric_limits<float>::quiet_NaN())));
  // SiLU's use: 1 + exp(-g) for a large g is 1, as with the true exp.
  EXPECT_EQ(quant::portable_swiglu(90.0f, 2.0f), 180.0f);
}

TEST(WarpOrder, ActivationQuantizationIsGgmlsReferenceByteForByte) {
  auto x = random_floats(2048, 1, 3.0f);
  x[5] = 0.0f;
  for (int k = 32; k < 64; ++k) x[k] = 0.0f;  // an all-zero block: scale 0, quants 0
  Quantized got(x);
  std::vector<quant::BlockQ8_0> want(x.size() / 32);
  quant::quantize_row(GgmlType::Q8_0, x.data(), want.data(), static_cast<int64_t>(x.size()));
  for (size_t b = 0; b < want.size(); ++b) {
    EXPECT_EQ(got.d[b], quant::fp16_to_fp32(want[b].d)) << "block " << b;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(got.q[32 * b + i], want[b].qs[i]) << "block " << b << " value " << i;
      sum += want[b].qs[i];
    }
    EXPECT_EQ(got.sum[b], sum);
  }
}

// Rows of every shape the experts use: fewer blocks than lanes, a whole number of lane rounds, a partial one.
TEST(WarpOrder, SimdPathGivesTheReferenceBitsAndThePackingsAgree) {
  if (kernels::select_simd_level() == kernels::SimdLevel::kScalar) GTEST_SKIP() << "no SIMD path here";
  for (const int64_t n_in : {int64_t{256}, int64_t{1536}, int64_t{2048}, int64_t{4096}}) {
    const int64_t n_out = 64;
    const auto rows = quantized_rows(GgmlType::Q4_0, n_in, n_out, static_cast<uint32_t>(n_in));
    const auto pk = packed(rows, n_out, n_in);
    Quantized x(random_floats(static_cast<size_t>(n_in), 7));
    const Weight plain{GgmlType::Q4_0, rows.data(), n_in, n_out, quant::RowPacking::kNone};
    const Weight x16{GgmlType::Q4_0, pk.data(), n_in, n_out, quant::RowPacking::kQ4_0x16};
    std::vector<float> ref(n_out), ref16(n_out), fast(n_out), part(32);
    warp_order_rows(plain, 0, n_out, x.row(), ref.data(), false);
    warp_order_rows(x16, 0, n_out, x.row(), ref16.data(), false);
    warp_order_rows(x16, 0, n_out, x.row(), fast.data(), true);
    EXPECT_EQ(std::memcmp(ref16.data(), ref.data(), ref.size() * 4), 0) << "n_in " << n_in;
    EXPECT_EQ(std::memcmp(fast.data(), ref.data(), ref.size() * 4), 0) << "n_in " << n_in;
    warp_order_rows(x16, 16, 48, x.row(), part.data(), true);  // a range of groups
    EXPECT_EQ(std::memcmp(part.data(), ref.data() + 16, 32 * 4), 0) << "n_in " << n_in;
  }
}

// Each row is the dot product (up to float rounding in another order), and the order is the warp's: lane sums
// then the butterfly, which a plain left-to-right sum does not reproduce for every row.
TEST(WarpOrder, RowsAreTheDotProductsSummedInTheWarpsOrder) {
  for (const GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0}) {
    const int64_t n_in = 2048, n_out = 96;
    const auto rows = quantized_rows(t, n_in, n_out, 3);
    Quantized x(random_floats(static_cast<size_t>(n_in), 4));
    const Weight w{t, rows.data(), n_in, n_out, quant::RowPacking::kNone};
    std::vector<float> got(n_out);
    warp_order_rows(w, 0, n_out, x.row(), got.data());
    std::vector<float> deq(static_cast<size_t>(n_in));
    int differs = 0;
    for (int64_t r = 0; r < n_out; ++r) {
      quant::dequantize_row(t, w.row(r), deq.data(), n_in);
      double exact = 0;
      float sequential = 0.0f;
      for (int64_t b = 0; b < n_in / 32; ++b) {
        double block = 0;
        for (int i = 0; i < 32; ++i) block += static_cast<double>(deq[32 * b + i]) * x.q[32 * b + i];
        exact += block * x.d[b];
        sequential += static_cast<float>(block * x.d[b]);
      }
      EXPECT_NEAR(got[r], exact, 1e-4 * std::max(1.0, std::abs(exact))) << ggml_type_name(t) << " row " << r;
      differs += got[r] != sequential;
    }
    EXPECT_GT(differs, 0) << ggml_type_name(t) << ": the warp order gave the sequential sum for every row";
  }
}

// A whole expert: the runner's down sums are the chain of the reference steps (quantize, gate and up rows,
// SwiGLU, quantize, down rows), bit for bit, with any number of threads and entries at once.
TEST(WarpOrder, RunnerIsTheReferenceChainForAnyThreadCount) {
  const int64_t n_in = 1024, n_ff = 512, n_out = 768;
  const auto g = packed(quantized_rows(GgmlType::Q4_0, n_in, n_ff, 11), n_ff, n_in);
  const auto u = packed(quantized_rows(GgmlType::Q4_0, n_in, n_ff, 12), n_ff, n_in);
  const auto d = quantized_rows(GgmlType::Q8_0, n_ff, n_out, 13);
  const Weight gate{GgmlType::Q4_0, g.data(), n_in, n_ff, quant::RowPacking::kQ4_0x16};
  const Weight up{GgmlType::Q4_0, u.data(), n_in, n_ff, quant::RowPacking::kQ4_0x16};
  const Weight down{GgmlType::Q8_0, d.data(), n_ff, n_out, quant::RowPacking::kNone};
  const auto x0 = random_floats(static_cast<size_t>(n_in), 21),
             x1 = random_floats(static_cast<size_t>(n_in), 22);

  const auto reference = [&](const std::vector<float>& x) {
    Quantized qx(x);
    std::vector<float> gv(n_ff), uv(n_ff), h(n_ff), v(n_out);
    warp_order_rows(gate, 0, n_ff, qx.row(), gv.data(), false);
    warp_order_rows(up, 0, n_ff, qx.row(), uv.data(), false);
    for (int64_t r = 0; r < n_ff; ++r) h[r] = gv[r] / (1.0f + quant::portable_expf(-gv[r])) * uv[r];
    Quantized qh(h);
    warp_order_rows(down, 0, n_out, qh.row(), v.data(), false);
    return v;
  };
  const auto want0 = reference(x0), want1 = reference(x1);
  for (const int threads : {1, 2, 3}) {
    HostExpertRunner runner(threads);
    std::vector<float> v0(n_out), v1(n_out);
    const HostExpertJob jobs[] = {{gate, up, down, x0.data(), v0.data()},
                                  {gate, up, down, x1.data(), v1.data()}};
    runner.run(jobs);
    EXPECT_EQ(std::memcmp(v0.data(), want0.data(), want0.size() * 4), 0) << threads << " threads";
    EXPECT_EQ(std::memcmp(v1.data(), want1.data(), want1.size() * 4), 0) << threads << " threads";
  }
}

TEST(WarpOrder, TypesWithoutAPathAreRefused) {
  EXPECT_TRUE(warp_order_supported(GgmlType::Q4_0, quant::RowPacking::kQ4_0x16));
  EXPECT_TRUE(warp_order_supported(GgmlType::Q8_0, quant::RowPacking::kNone));
  EXPECT_FALSE(warp_order_supported(GgmlType::MXFP4, quant::RowPacking::kNone));
  EXPECT_FALSE(warp_order_supported(GgmlType::Q6_K, quant::RowPacking::kNone));
  std::vector<uint8_t> rows(ggml_row_bytes(GgmlType::Q6_K, 256) * 16);
  const Weight w{GgmlType::Q6_K, rows.data(), 256, 16, quant::RowPacking::kNone};
  std::vector<float> x(256, 1.0f), out(16);
  Quantized q(x);
  EXPECT_THROW(warp_order_rows(w, 0, 16, q.row(), out.data()), df::Error);
}

}  // namespace
}  // namespace df::backend::cuda_host

// dequantize_row(quantize_row(x)) against x, for every type, several distributions and several row lengths,
// with per-block error bounds derived from each format; plus the rejection of bad requests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "quant/quant.h"
#include "util/error.h"

namespace {

using df::GgmlType;
namespace q = df::quant;

constexpr double kHalfUlp = 0x1p-11;        // relative rounding of a normal f16
constexpr double kHalfSubnormal = 0x1p-25;  // absolute rounding of an f16 in the subnormal range

struct Range {
  double min = 0, max = 0, amax = 0;
};
Range range_of(const float* x, int n) {
  Range r{x[0], x[0], 0};
  for (int i = 0; i < n; ++i) {
    r.min = std::min<double>(r.min, x[i]);
    r.max = std::max<double>(r.max, x[i]);
    r.amax = std::max<double>(r.amax, std::fabs(x[i]));
  }
  return r;
}

// Largest |x - dequantize(quantize(x))| the format allows for a block whose values span r.
double error_bound(GgmlType t, const Range& r) {
  switch (t) {
    case GgmlType::F32:
      return 0.0;
    case GgmlType::F16:
      return r.amax * kHalfUlp + kHalfSubnormal;
    case GgmlType::BF16:
      return r.amax * 0x1p-8;
    case GgmlType::Q8_0:
    case GgmlType::Q8_1:
      // d = amax/127: rounding costs d/2; d stored as f16 moves each of up to 127 steps.
      return r.amax * (0.5 / 127 + kHalfUlp) + 127 * kHalfSubnormal;
    case GgmlType::Q8_K:
      return r.amax * (0.5 / 127) * (1 + 1e-6);  // f32 scale
    case GgmlType::Q4_0:
      // The signed extreme maps to -8, so values of the other sign clamp at +7: up to a full step d = amax/8.
      return r.amax * (1.0 / 8 + kHalfUlp) + 8 * kHalfSubnormal;
    case GgmlType::Q4_1: {
      // Steps of (max - min)/15 from min: half a step, plus f16 rounding of d (up to 15 steps) and of min.
      const double span = r.max - r.min;
      return span * (1.0 / 30 + kHalfUlp) + std::fabs(r.min) * kHalfUlp + 16 * kHalfSubnormal;
    }
    case GgmlType::MXFP4:
      // Steps 2^(k-3) * {0,1,2,3,4,6,8,12} with 2^k <= amax < 2^(k+1): the widest gap (8 to 12) costs 2^(k-2)
      // <= amax/4, values above 12 * 2^(k-3) = 1.5 * 2^k clamp with error < 2^(k-1) <= amax/3.
      return r.amax / 3;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      // Sub-blocks of 32 on a grid of 2^b - 1 steps over the super-block's span (min clipped at 0). The ideal
      // error is half a step; the weighted least-squares fit trades accuracy on small values and the 6-bit
      // sub-block scales and mins add their own rounding, so allow 3 (Q4_K) and 4 (Q5_K) half steps, plus
      // f16 rounding of d and dmin (at most 63 * 31 + 63 steps of them).
      const double span = r.max - std::min(r.min, 0.0);
      const double steps = t == GgmlType::Q4_K ? 15 : 31, half_steps = t == GgmlType::Q4_K ? 3 : 4;
      return span * half_steps / (2 * steps) + 63 * 32 * kHalfSubnormal + span * 2 * kHalfUlp;
    }
    case GgmlType::Q6_K:
      // 64 levels, d * scale ~ amax/32: half a step is amax/64; allow two for the 8-bit sub-block scales.
      return r.amax / 32 + 128 * 32 * kHalfSubnormal;
    default:
      return 0.0;
  }
}

struct Distribution {
  std::string name;
  std::function<float(std::mt19937&, int)> sample;
};
std::vector<Distribution> distributions() {
  auto normal = [](std::mt19937& g) { return std::normal_distribution<float>(0.0f, 1.0f)(g); };
  auto uniform = [](std::mt19937& g) { return std::uniform_real_distribution<float>(0.0f, 1.0f)(g); };
  return {
      {"normal", [=](std::mt19937& g, int) { return normal(g); }},
      {"normal_1e-3", [=](std::mt19937& g, int) { return normal(g) * 1e-3f; }},
      {"zeros", [](std::mt19937&, int) { return 0.0f; }},
      {"tiny_1e-6", [=](std::mt19937& g, int) { return normal(g) * 1e-6f; }},
      {"huge_1e4", [=](std::mt19937& g, int) { return normal(g) * 1e4f; }},
      {"uniform_positive", [=](std::mt19937& g, int) { return uniform(g); }},
      {"uniform_negative", [=](std::mt19937& g, int) { return -uniform(g); }},
      {"negative_extreme", [=](std::mt19937& g, int i) { return i % 32 == 17 ? -4.5f : normal(g); }},
      {"outliers", [=](std::mt19937& g, int i) { return normal(g) * (i % 37 == 5 ? 20.0f : 1.0f); }},
      {"sparse", [=](std::mt19937& g, int) { return g() % 29 == 0 ? normal(g) : 0.0f; }},
      {"constant_blocks",
       [](std::mt19937&, int i) { return 0.25f * static_cast<float>((i / 32) % 5) - 0.5f; }},
      {"mixed_block_scales",
       [=](std::mt19937& g, int i) {
         return normal(g) * std::pow(10.0f, static_cast<float>((i / 32) % 4) - 1);
       }},
  };
}

class QuantRoundTrip : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QuantRoundTrip, ErrorStaysWithinTheFormatBound) {
  const GgmlType t = GetParam();
  const int block = static_cast<int>(df::ggml_traits(t).block_size);
  const int sub = block == 256 ? 256 : 32;  // the unit the bound is stated for
  std::vector<int> lengths =
      block == 256 ? std::vector<int>{256, 512, 1024} : std::vector<int>{32, 64, 96, 288, 1024};
  if (block == 1) lengths = {1, 7, 32, 1000};
  std::mt19937 rng(1234);
  for (const auto& dist : distributions()) {
    for (int n : lengths) {
      std::vector<float> x(n), y(n, NAN);
      for (int i = 0; i < n; ++i) x[i] = dist.sample(rng, i);
      std::vector<uint8_t> bytes(df::ggml_row_bytes(t, n));
      q::quantize_row(t, x.data(), bytes.data(), n);
      q::dequantize_row(t, bytes.data(), y.data(), n);
      for (int b0 = 0; b0 < n; b0 += std::min(sub, n)) {
        const int len = std::min(sub, n - b0);
        const Range r = range_of(x.data() + b0, len);
        const double bound = error_bound(t, r) * (1 + 1e-6) + 1e-30;
        for (int i = b0; i < b0 + len; ++i) {
          ASSERT_TRUE(std::isfinite(y[i])) << dist.name << " n=" << n << " i=" << i;
          ASSERT_LE(std::fabs(static_cast<double>(x[i]) - y[i]), bound)
              << df::ggml_type_name(t) << " " << dist.name << " n=" << n << " i=" << i << " x=" << x[i]
              << " y=" << y[i];
        }
      }
      if (dist.name == "zeros") {
        for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], 0.0f) << dist.name;
      }
    }
  }
}

// Values already on a format's grid, with the extreme that fixes the scale to 1 (or 1/2) in every block, must
// come back unchanged. nullopt for the K-quants, whose scale search does not promise this.
std::optional<std::vector<float>> on_grid_values(GgmlType t, int n, std::mt19937& rng) {
  std::vector<float> x(n);
  auto integers = [&](int lo, int hi, int block, float extreme) {
    for (int i = 0; i < n; ++i)
      x[i] = i % block == 5 ? extreme : static_cast<float>(lo + static_cast<int>(rng() % (hi - lo + 1)));
  };
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      integers(-200, 200, 1 << 30, 0.0f);
      break;
    case GgmlType::Q8_0:
    case GgmlType::Q8_1:
      integers(-126, 126, 32, 127.0f);
      break;  // d = 127/127 = 1
    case GgmlType::Q8_K:
      integers(-126, 126, 256, -127.0f);
      break;
    case GgmlType::Q4_0:
      integers(-7, 7, 32, -8.0f);
      break;  // d = -8/-8 = 1, q = x + 8
    case GgmlType::Q4_1:
      integers(1, 14, 32, 0.0f);
      for (int i = 0; i < n; i += 32) x[i + 6] = 15.0f;  // min 0, max 15: d = 1, m = 0
      break;
    case GgmlType::MXFP4: {
      static constexpr float kGrid[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, -0.5f, -1, -1.5f, -2, -3, -4, -6};
      for (int i = 0; i < n; ++i) x[i] = i % 32 == 5 ? 6.0f : kGrid[rng() % 14];  // amax 6: d = 2^-1
      break;
    }
    default:
      return std::nullopt;
  }
  return x;
}

TEST(QuantGrid, ValuesOnTheGridSurviveExactly) {
  std::mt19937 rng(99);
  const int n = 512;
  int checked = 0;
  for (GgmlType t :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0,
        GgmlType::Q8_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::MXFP4}) {
    const auto x = on_grid_values(t, n, rng);
    if (!x) continue;
    std::vector<uint8_t> bytes(df::ggml_row_bytes(t, n));
    std::vector<float> y(n);
    q::quantize_row(t, x->data(), bytes.data(), n);
    q::dequantize_row(t, bytes.data(), y.data(), n);
    for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], (*x)[i]) << df::ggml_type_name(t) << " i=" << i;
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRoundTrip,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0,
                                           GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::MXFP4),
                         [](const auto& info) { return std::string(df::ggml_type_name(info.param)); });

TEST(QuantRequests, BadLengthsAndUnsupportedTypesThrow) {
  std::vector<float> x(1024, 1.0f);
  std::vector<uint8_t> bytes(4096);
  EXPECT_THROW(q::quantize_row(GgmlType::Q4_0, x.data(), bytes.data(), 33), df::Error);
  EXPECT_THROW(q::quantize_row(GgmlType::Q4_K, x.data(), bytes.data(), 128), df::Error);
  EXPECT_THROW(q::dequantize_row(GgmlType::Q6_K, bytes.data(), x.data(), 255), df::Error);
  EXPECT_THROW(q::dequantize_row(GgmlType::F16, bytes.data(), x.data(), -1), df::Error);
  EXPECT_THROW(q::quantize_row(GgmlType::Q5_0, x.data(), bytes.data(), 32), df::Error);
  EXPECT_THROW(q::dequantize_row(GgmlType::Q2_K, bytes.data(), x.data(), 256), df::Error);
  EXPECT_THROW(q::dequantize_row(GgmlType::I32, bytes.data(), x.data(), 4), df::Error);
  EXPECT_THROW(q::dequantize_row(static_cast<GgmlType>(77), bytes.data(), x.data(), 4), df::Error);
  EXPECT_THROW(q::vec_dot_type(GgmlType::Q8_K), df::Error);
  EXPECT_THROW(q::vec_dot_type(GgmlType::Q8_1), df::Error);
  EXPECT_THROW(q::quantize_activation(GgmlType::Q4_0, x.data(), bytes.data(), 32), df::Error);
  EXPECT_THROW(q::vec_dot(GgmlType::Q4_0, bytes.data(), bytes.data(), 48), df::Error);
  EXPECT_THROW(q::vec_dot(GgmlType::Q8_K, bytes.data(), bytes.data(), 256), df::Error);
  try {
    q::quantize_row(GgmlType::Q4_K, x.data(), bytes.data(), 100);
    FAIL() << "no exception";
  } catch (const df::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Q4_K"), std::string::npos) << what;
    EXPECT_NE(what.find("256"), std::string::npos) << what;
    EXPECT_NE(what.find("100"), std::string::npos) << what;
  }
  // Empty rows are fine.
  EXPECT_NO_THROW(q::quantize_row(GgmlType::Q4_0, x.data(), bytes.data(), 0));
  EXPECT_EQ(q::vec_dot(GgmlType::Q4_K, bytes.data(), bytes.data(), 0), 0.0f);
}

TEST(QuantRequests, SupportedTypesAndDotPairs) {
  for (GgmlType t :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0,
        GgmlType::Q8_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::MXFP4})
    EXPECT_TRUE(q::is_supported(t)) << df::ggml_type_name(t);
  for (GgmlType t :
       {GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::I8, GgmlType::F64})
    EXPECT_FALSE(q::is_supported(t)) << df::ggml_type_name(t);
  EXPECT_EQ(q::vec_dot_type(GgmlType::Q4_0), GgmlType::Q8_0);
  EXPECT_EQ(q::vec_dot_type(GgmlType::Q8_0), GgmlType::Q8_0);
  EXPECT_EQ(q::vec_dot_type(GgmlType::MXFP4), GgmlType::Q8_0);
  EXPECT_EQ(q::vec_dot_type(GgmlType::Q4_1), GgmlType::Q8_1);
  EXPECT_EQ(q::vec_dot_type(GgmlType::Q4_K), GgmlType::Q8_K);
  EXPECT_EQ(q::vec_dot_type(GgmlType::Q5_K), GgmlType::Q8_K);
  EXPECT_EQ(q::vec_dot_type(GgmlType::Q6_K), GgmlType::Q8_K);
  EXPECT_EQ(q::vec_dot_type(GgmlType::F16), GgmlType::F16);
  EXPECT_EQ(q::vec_dot_type(GgmlType::BF16), GgmlType::BF16);
  EXPECT_EQ(q::vec_dot_type(GgmlType::F32), GgmlType::F32);
}

}  // namespace

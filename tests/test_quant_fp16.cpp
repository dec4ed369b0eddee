// IEEE half and bfloat16 conversions: exhaustive over all 65536 encodings, ties, subnormals, overflow and
// NaN, against references computed in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "quant/quant.h"

namespace {

namespace q = df::quant;

bool is_half_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }

// The value of a half, from the definition of binary16.
double half_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? std::nan("") : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Round-to-nearest-even conversion to half, by search over the finite positive halves.
uint16_t reference_fp16(float f) {
  static const std::vector<double> positives = [] {
    std::vector<double> v;
    for (uint16_t h = 0; h <= 0x7bff; ++h) v.push_back(half_value(h));
    return v;
  }();
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;  // beyond the midpoint of 65504 and 65536
  if (a >= 65504.0) return sign | 0x7bff;
  const auto it = std::lower_bound(positives.begin(), positives.end(), a);
  auto hi = static_cast<uint16_t>(it - positives.begin());
  if (hi == 0) return sign;
  const auto lo = static_cast<uint16_t>(hi - 1);
  const double d_lo = a - positives[lo], d_hi = positives[hi] - a;
  if (d_lo < d_hi) return sign | lo;
  if (d_hi < d_lo) return sign | hi;
  return sign | ((lo & 1) ? hi : lo);
}

// Round-to-nearest-even conversion to bfloat16, in double.
uint16_t reference_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto down = static_cast<uint16_t>(bits >> 16);
  const auto up = static_cast<uint16_t>(down + 1);  // next magnitude (may become inf)
  const double a = std::fabs(static_cast<double>(f));
  const double v_down = std::fabs(static_cast<double>(q::bf16_to_fp32(down)));
  const double v_up =
      (up & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(q::bf16_to_fp32(up)));
  if (a - v_down < v_up - a) return down;
  if (v_up - a < a - v_down) return up;
  return (down & 1) ? up : down;
}

TEST(QuantFp16, EveryHalfConvertsExactlyAndBack) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = q::fp16_to_fp32(h);
    if (is_half_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      const uint16_t back = q::fp32_to_fp16(f);
      EXPECT_TRUE(is_half_nan(back)) << std::hex << h;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), half_value(h)) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    ASSERT_EQ(q::fp32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(QuantFp16, TiesRoundToEvenAndNeighboursRoundToNearest) {
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const double mid = (half_value(h) + half_value(static_cast<uint16_t>(h + 1))) / 2;
      const auto tie = static_cast<float>(sign ? -mid : mid);
      ASSERT_EQ(static_cast<double>(std::fabs(tie)), mid);  // the midpoint is exact in float
      const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : h;
      ASSERT_EQ(q::fp32_to_fp16(tie), sign | even) << std::hex << h;
      const float above = std::nextafter(std::fabs(tie), INFINITY),
                  below = std::nextafter(std::fabs(tie), 0.0f);
      ASSERT_EQ(q::fp32_to_fp16(sign ? -above : above), sign | (h + 1)) << std::hex << h;
      ASSERT_EQ(q::fp32_to_fp16(sign ? -below : below), sign | h) << std::hex << h;
    }
  }
}

TEST(QuantFp16, OverflowUnderflowAndSpecialValues) {
  EXPECT_EQ(q::fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(q::fp32_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(q::fp32_to_fp16(65520.0f), 0x7c00);  // the tie between 65504 and 2^16 goes to even: inf
  EXPECT_EQ(q::fp32_to_fp16(-1e10f), 0xfc00);
  EXPECT_EQ(q::fp32_to_fp16(INFINITY), 0x7c00);
  EXPECT_EQ(q::fp32_to_fp16(-INFINITY), 0xfc00);
  EXPECT_EQ(q::fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: tie to zero
  EXPECT_EQ(q::fp32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(q::fp32_to_fp16(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(q::fp32_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(q::fp32_to_fp16(-1e-30f), 0x8000);
  EXPECT_EQ(q::fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(q::fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(q::fp32_to_fp16(std::nanf("")), 0x7e00);
  EXPECT_EQ(q::fp32_to_fp16(-std::nanf("")), 0xfe00);
  EXPECT_EQ(q::fp16_to_fp32(0x7c00), INFINITY);
  EXPECT_EQ(q::fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(q::fp16_to_fp32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(q::fp16_to_fp32(0x3c00), 1.0f);
}

TEST(QuantFp16, RandomFloatsRoundAsTheReference) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Exponents concentrated on the half range (and a little beyond) so that every branch is hit.
    const auto exponent = static_cast<uint32_t>(96 + rng() % 50),
               mantissa = static_cast<uint32_t>(rng() & 0x7fffff), sign = static_cast<uint32_t>(rng() & 1);
    const float f = std::bit_cast<float>((sign << 31) | (exponent << 23) | mantissa);
    ASSERT_EQ(q::fp32_to_fp16(f), reference_fp16(f)) << f;
  }
}

TEST(QuantBf16, EveryBfloatConvertsExactlyAndBack) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = q::bf16_to_fp32(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), static_cast<uint32_t>(b) << 16);
    if (std::isnan(f)) {
      const uint16_t back = q::fp32_to_bf16(f);
      EXPECT_TRUE(std::isnan(q::bf16_to_fp32(back)));
      EXPECT_NE(back & 0x40, 0) << "NaN must come back quiet";
    } else {
      ASSERT_EQ(q::fp32_to_bf16(f), b) << std::hex << b;
    }
  }
}

TEST(QuantBf16, RoundsToNearestEven) {
  for (uint32_t hi : {0x3f80u, 0x3f81u, 0xbf80u, 0x0001u, 0x4049u, 0x7f7eu}) {
    const uint32_t base = hi << 16;
    const auto even = static_cast<uint16_t>((hi & 1) ? hi + 1 : hi);
    EXPECT_EQ(q::fp32_to_bf16(std::bit_cast<float>(base | 0x8000u)), even) << std::hex << hi;
    EXPECT_EQ(q::fp32_to_bf16(std::bit_cast<float>(base | 0x8001u)), hi + 1) << std::hex << hi;
    EXPECT_EQ(q::fp32_to_bf16(std::bit_cast<float>(base | 0x7fffu)), hi) << std::hex << hi;
  }
  EXPECT_EQ(q::fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(q::fp32_to_bf16(std::bit_cast<float>(0x7fc00001u)), 0x7fc0);
  EXPECT_EQ(q::fp32_to_bf16(std::bit_cast<float>(0x7f800001u)), 0x7fc0);  // signalling NaN made quiet
  std::mt19937 rng(11);
  for (int i = 0; i < 100000; ++i) {
    const float f =
        std::bit_cast<float>(static_cast<uint32_t>(rng() & 0xff7fffffu));  // any finite float of either sign
    if (!std::isfinite(f)) continue;
    ASSERT_EQ(q::fp32_to_bf16(f), reference_bf16(f)) << f;
  }
}

}  // namespace

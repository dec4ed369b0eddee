// The activation quantizers of every supported SIMD level produce the bytes of quant::quantize_activation:
// ordinary rows, rounding ties (x.5 after scaling: half away from zero for Q8_0/Q8_1, half to even for
// Q8_K), all-zero blocks, ties for the largest magnitude (the first one's sign wins in Q8_K), scales in the
// f16 subnormal range and beyond f16's range, and blocks with infinities or NaN.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels/vec_dot.h"
#include "quant/quant.h"

namespace df::kernels {
namespace {

std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel level : kAllSimdLevels) {
    if (simd_level_supported(level)) out.push_back(level);
  }
  return out;
}

std::vector<float> normal_floats(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Named inputs for one activation format with block size `block`.
std::vector<std::pair<std::string, std::vector<float>>> inputs(int block, std::mt19937& rng) {
  const size_t n = static_cast<size_t>(block) * 5;
  std::vector<std::pair<std::string, std::vector<float>>> out;
  out.emplace_back("normal", normal_floats(n, rng, 1.0f));
  out.emplace_back("tiny (f16-subnormal scales)", normal_floats(n, rng, 1e-6f));
  out.emplace_back("huge (scales beyond f16)", normal_floats(n, rng, 1e30f));
  out.emplace_back("float subnormals", normal_floats(n, rng, 1e-39f));

  // Ties after scaling. Q8_0/Q8_1: amax = 127 gives d = 1, so x = k + 0.5 is a tie. Q8_K: the extreme -127
  // gives iscale = 1. Both set the extreme first in each block.
  std::vector<float> ties(n);
  for (size_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(rng() % 253) - 126;  // -126..126
    ties[i] = static_cast<float>(k) + ((rng() & 1) ? 0.5f : -0.5f);
    if (i % static_cast<size_t>(block) == 0) ties[i] = -127.0f;
  }
  out.emplace_back("ties", ties);

  std::vector<float> zeros(n, 0.0f);
  for (size_t i = static_cast<size_t>(block); i < static_cast<size_t>(2 * block); ++i) zeros[i] = -0.0f;
  zeros[static_cast<size_t>(3 * block) + 5] = 1e-3f;  // one non-zero block among zero ones
  out.emplace_back("zero blocks", zeros);

  // Equal magnitudes of both signs: which one counts as the extreme decides the sign of Q8_K's scale. The
  // first two share a group of 8 lanes, the third is far away.
  if (block >= 32) {
    auto equal_extremes = normal_floats(n, rng, 0.5f);
    for (size_t b = 0; b < 5; ++b) {
      const size_t base = b * static_cast<size_t>(block);
      const float first = (b & 1) ? 4.0f : -4.0f;
      equal_extremes[base + 9] = first;
      equal_extremes[base + 14] = -first;
      equal_extremes[base + static_cast<size_t>(block) - 1] = -first;
    }
    out.emplace_back("equal extremes", equal_extremes);
  }

  auto non_finite = normal_floats(n, rng, 1.0f);
  non_finite[1] = std::numeric_limits<float>::infinity();
  non_finite[static_cast<size_t>(block) + 2] = std::numeric_limits<float>::quiet_NaN();
  non_finite[static_cast<size_t>(2 * block) + 7] = -std::numeric_limits<float>::infinity();
  non_finite[static_cast<size_t>(3 * block) - 1] = -std::numeric_limits<float>::quiet_NaN();
  out.emplace_back("inf and NaN", non_finite);

  // Random bit patterns: every exponent, subnormals, infinities, NaNs with payloads.
  std::vector<float> bits(n);
  for (auto& x : bits) x = std::bit_cast<float>(static_cast<uint32_t>(rng()));
  out.emplace_back("random bits", bits);
  return out;
}

TEST(ActivationQuantizers, EqualTheReferenceByteForByte) {
  std::mt19937 rng(31337);
  for (GgmlType act : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q8_1, GgmlType::Q8_K}) {
    const int block = act == GgmlType::F16 ? 8 : static_cast<int>(ggml_traits(act).block_size);
    for (const auto& [name, x] : inputs(block, rng)) {
      for (size_t len : {x.size(), x.size() - static_cast<size_t>(block)}) {
        // F16 rows of any length: also one that does not fill the last 8 lanes.
        const int64_t n = static_cast<int64_t>(act == GgmlType::F16 ? len - 3 : len);
        std::vector<uint8_t> ref(ggml_row_bytes(act, n)), got(ref.size() + 1, 0xA5);
        quant::quantize_activation(act, x.data(), ref.data(), n);
        for (SimdLevel level : supported_levels()) {
          std::fill(got.begin(), got.end(), 0xA5);
          activation_quantizer(act, level)(x.data(), got.data(), n);
          size_t first_diff = 0;
          while (first_diff < ref.size() && ref[first_diff] == got[first_diff]) ++first_diff;
          EXPECT_EQ(first_diff, ref.size())
              << ggml_type_name(act) << " at " << simd_level_name(level) << ", input " << name << ", n=" << n
              << ": first differing byte " << first_diff;
          EXPECT_EQ(got.back(), 0xA5) << "wrote past the row";
        }
      }
    }
  }
}

TEST(ActivationQuantizers, FloatFormatsWithoutSimdVersionsUseTheReference) {
  std::mt19937 rng(5);
  const auto x = normal_floats(33, rng, 2.0f);
  for (GgmlType act : {GgmlType::F32, GgmlType::BF16}) {
    std::vector<uint8_t> ref(ggml_row_bytes(act, 33)), got(ref.size());
    quant::quantize_activation(act, x.data(), ref.data(), 33);
    for (SimdLevel level : supported_levels()) {
      activation_quantizer(act, level)(x.data(), got.data(), 33);
      EXPECT_EQ(got, ref) << ggml_type_name(act);
    }
  }
}

}  // namespace
}  // namespace df::kernels

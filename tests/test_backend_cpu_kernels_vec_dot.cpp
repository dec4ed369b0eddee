// Every dot-product kernel at every SIMD level this machine supports (the scalar level always) against the
// scalar references of quant/: bit-identical for the block formats, within the stated double-rounding
// tolerance for F32/F16/BF16. Inputs: quantized random rows, raw random bytes with chosen scales (zero,
// signed zero, subnormal and extreme f16 values, E8M0 exponents 0..255, f32 Q8_K scales from subnormal to
// large), and extreme quants (all bits clear / all set, activations all -128 / +127); row lengths of one
// block, odd block counts and long rows. The multi-row entry must give exactly the single-row results.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels/vec_dot.h"
#include "quant/quant.h"

namespace df::kernels {
namespace {

namespace q = df::quant;

std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel level : kAllSimdLevels) {
    if (simd_level_supported(level)) out.push_back(level);
  }
  return out;
}

bool same_float(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}

bool is_float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

enum class Fill { kQuantized, kRandomBytes, kLowQuants, kHighQuants };

const char* fill_name(Fill f) {
  switch (f) {
    case Fill::kQuantized:
      return "quantized";
    case Fill::kRandomBytes:
      return "random-bytes";
    case Fill::kLowQuants:
      return "low-quants";
    case Fill::kHighQuants:
      return "high-quants";
  }
  return "?";
}

// f16 scales worth covering: zeros, subnormals, the normal extremes, ordinary values of both signs.
uint16_t pick_half(std::mt19937& rng) {
  static constexpr uint16_t kSpecial[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x8200, 0x0400,
                                          0x3C00, 0xB800, 0x7BFF, 0xFBFF, 0x1000, 0x2E66};
  const uint32_t r = rng();
  if (r % 3 == 0) return kSpecial[(r / 3) % std::size(kSpecial)];
  uint16_t h;
  do h = static_cast<uint16_t>(rng());
  while ((h & 0x7C00) == 0x7C00);  // finite
  return h;
}

float pick_q8k_scale(std::mt19937& rng) {
  static constexpr float kScales[] = {0.0f, -0.0f, 1e-40f, 3.5e-3f, -7.25e-4f, 1.0f, 1e20f, -2.0e-2f};
  return kScales[rng() % std::size(kScales)];
}

std::vector<float> normal_floats(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Values of both signs spread over 2^-14 .. 2^14 (f16 subnormals to near its largest values): makes the
// order of a float sum matter.
std::vector<float> wide_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> expo(-14.0f, 14.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = std::exp2(expo(rng)) * ((rng() & 1) ? 1.0f : -1.0f);
  return v;
}

template <typename Block, typename Patch>
void patch_blocks(std::vector<uint8_t>& bytes, Patch&& patch) {
  for (size_t off = 0; off + sizeof(Block) <= bytes.size(); off += sizeof(Block)) {
    Block b;
    std::memcpy(&b, bytes.data() + off, sizeof b);
    patch(b);
    std::memcpy(bytes.data() + off, &b, sizeof b);
  }
}

// Fill every quant byte of a block with v, keeping the scale fields.
template <typename Block>
void fill_quants(Block& b, uint8_t v) {
  if constexpr (requires { b.ql; }) {
    std::memset(b.ql, v, sizeof b.ql);
    std::memset(b.qh, v, sizeof b.qh);
  } else {
    std::memset(b.qs, v, sizeof b.qs);
    if constexpr (requires { b.qh; }) std::memset(b.qh, v, sizeof b.qh);
  }
}

// Raw blocks: random bytes, scales chosen by pick_half, quants optionally forced to all-0 / all-1 bits.
template <typename Block>
void patch_weight_blocks(std::vector<uint8_t>& bytes, Fill fill, std::mt19937& rng) {
  patch_blocks<Block>(bytes, [&](Block& b) {
    if constexpr (requires { b.e; }) {
      b.e = static_cast<uint8_t>(rng());
    } else {
      b.d = pick_half(rng);
    }
    if constexpr (requires { b.m; }) b.m = pick_half(rng);
    if constexpr (requires { b.dmin; }) b.dmin = pick_half(rng);
    if (fill == Fill::kLowQuants) fill_quants(b, 0x00);
    if (fill == Fill::kHighQuants) fill_quants(b, 0xFF);
  });
}

std::vector<uint8_t> make_weights(GgmlType t, int64_t rows, int64_t n, Fill fill, std::mt19937& rng) {
  const size_t row_bytes = ggml_row_bytes(t, n);
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  if (fill == Fill::kQuantized || is_float_type(t)) {
    for (int64_t r = 0; r < rows; ++r) {
      const auto x = fill == Fill::kRandomBytes
                         ? wide_floats(static_cast<size_t>(n), rng)
                         : normal_floats(static_cast<size_t>(n), rng, 0.05f + 0.1f * r);
      q::quantize_row(t, x.data(), out.data() + static_cast<size_t>(r) * row_bytes, n);
    }
    return out;
  }
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  switch (t) {
    case GgmlType::Q4_0:
      patch_weight_blocks<q::BlockQ4_0>(out, fill, rng);
      break;
    case GgmlType::Q4_1:
      patch_weight_blocks<q::BlockQ4_1>(out, fill, rng);
      break;
    case GgmlType::Q8_0:
      patch_weight_blocks<q::BlockQ8_0>(out, fill, rng);
      break;
    case GgmlType::MXFP4:
      patch_weight_blocks<q::BlockMXFP4>(out, fill, rng);
      break;
    case GgmlType::Q4_K:
      patch_weight_blocks<q::BlockQ4_K>(out, fill, rng);
      break;
    case GgmlType::Q5_K:
      patch_weight_blocks<q::BlockQ5_K>(out, fill, rng);
      break;
    case GgmlType::Q6_K:
      patch_weight_blocks<q::BlockQ6_K>(out, fill, rng);
      break;
    default:
      ADD_FAILURE() << "no raw weights for " << ggml_type_name(t);
  }
  return out;
}

std::vector<uint8_t> make_acts(GgmlType act, int64_t cols, int64_t n, Fill fill, std::mt19937& rng) {
  const size_t row_bytes = ggml_row_bytes(act, n);
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(cols));
  if (fill == Fill::kQuantized || is_float_type(act)) {
    for (int64_t c = 0; c < cols; ++c) {
      const auto x = fill == Fill::kRandomBytes ? wide_floats(static_cast<size_t>(n), rng)
                                                : normal_floats(static_cast<size_t>(n), rng, 1.0f + c);
      q::quantize_activation(act, x.data(), out.data() + static_cast<size_t>(c) * row_bytes, n);
    }
    return out;
  }
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  const uint8_t forced = fill == Fill::kLowQuants ? 0x80 : 0x7F;  // -128 or +127
  const bool force = fill != Fill::kRandomBytes;
  switch (act) {
    case GgmlType::Q8_0:
      patch_blocks<q::BlockQ8_0>(out, [&](q::BlockQ8_0& b) {
        b.d = pick_half(rng);
        if (force) std::memset(b.qs, forced, sizeof b.qs);
      });
      break;
    case GgmlType::Q8_1:
      patch_blocks<q::BlockQ8_1>(out, [&](q::BlockQ8_1& b) {
        b.d = pick_half(rng);
        b.s = pick_half(rng);
        if (force) std::memset(b.qs, forced, sizeof b.qs);
      });
      break;
    case GgmlType::Q8_K:
      // bsums stay random: the kernels must use the stored sums, as the reference does.
      patch_blocks<q::BlockQ8_K>(out, [&](q::BlockQ8_K& b) {
        b.d = pick_q8k_scale(rng);
        if (force) std::memset(b.qs, forced, sizeof b.qs);
      });
      break;
    default:
      ADD_FAILURE() << "no raw activations for " << ggml_type_name(act);
  }
  return out;
}

struct Case {
  GgmlType type;
  std::vector<int64_t> blocks;  // row lengths, in blocks
};

const std::vector<Case>& block_cases() {
  static const std::vector<Case> cases = {
      {GgmlType::Q4_0, {1, 3, 7, 8, 9, 17, 64, 193}}, {GgmlType::Q4_1, {1, 3, 7, 8, 9, 17, 64, 193}},
      {GgmlType::Q8_0, {1, 3, 7, 8, 9, 17, 64, 193}}, {GgmlType::MXFP4, {1, 3, 7, 8, 9, 17, 64, 193}},
      {GgmlType::Q4_K, {1, 2, 3, 8, 9, 24}},          {GgmlType::Q5_K, {1, 2, 3, 8, 9, 24}},
      {GgmlType::Q6_K, {1, 2, 3, 8, 9, 24}},
  };
  return cases;
}

std::string describe(GgmlType t, SimdLevel level, int64_t n, Fill wf, Fill af) {
  return std::string(ggml_type_name(t)) + " at " + std::string(simd_level_name(level)) +
         ", n=" + std::to_string(n) + ", weights " + fill_name(wf) + ", activations " + fill_name(af);
}

TEST(VecDotKernels, BlockFormatsEqualTheScalarReferenceBitForBit) {
  std::mt19937 rng(20240601);
  constexpr Fill kFills[] = {Fill::kQuantized, Fill::kRandomBytes, Fill::kLowQuants, Fill::kHighQuants};
  for (const Case& c : block_cases()) {
    const GgmlType act = q::vec_dot_type(c.type);
    for (int64_t nb : c.blocks) {
      const int64_t n = nb * ggml_traits(c.type).block_size;
      for (Fill wf : kFills) {
        for (Fill af : kFills) {
          const auto w = make_weights(c.type, 1, n, wf, rng);
          const auto a = make_acts(act, 1, n, af, rng);
          const float ref = q::vec_dot(c.type, w.data(), a.data(), n);
          for (SimdLevel level : supported_levels()) {
            const VecDotKernels& k = vec_dot_kernels(c.type, level);
            ASSERT_EQ(k.level, level) << ggml_type_name(c.type);
            const float got = k.dot(w.data(), a.data(), n);
            ASSERT_TRUE(same_float(got, ref))
                << describe(c.type, level, n, wf, af) << ": " << got << " vs reference " << ref;
          }
        }
      }
    }
  }
}

// |kernel - reference| <= 2^-23 |reference| + 2 n 2^-53 sum|w_i a_i|, as vec_dot.h states.
TEST(VecDotKernels, FloatFormatsMatchTheReferenceWithinTheReorderedSumBound) {
  std::mt19937 rng(7);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 33, 2053}) {
      for (Fill fill : {Fill::kQuantized, Fill::kRandomBytes}) {
        const auto w = make_weights(t, 1, n, fill, rng);
        const auto a = make_acts(t, 1, n, fill, rng);
        std::vector<float> wf(static_cast<size_t>(n)), af(static_cast<size_t>(n));
        q::dequantize_row(t, w.data(), wf.data(), n);
        q::dequantize_row(t, a.data(), af.data(), n);
        double magnitude = 0.0;
        for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(static_cast<double>(wf[i] * af[i]));
        const float ref = q::vec_dot(t, w.data(), a.data(), n);
        const double bound = std::ldexp(std::fabs(ref), -23) + 2.0 * n * std::ldexp(magnitude, -53) + 1e-44;
        for (SimdLevel level : supported_levels()) {
          const float got = vec_dot_kernels(t, level).dot(w.data(), a.data(), n);
          if (level == SimdLevel::kScalar) {
            EXPECT_TRUE(same_float(got, ref)) << ggml_type_name(t) << " n=" << n;
          }
          EXPECT_LE(std::fabs(static_cast<double>(got) - ref), bound)
              << describe(t, level, n, fill, fill) << ": " << got << " vs reference " << ref;
        }
      }
    }
  }
}

// gemm over a rows x cols tile with padded strides equals dot for every pair, and touches nothing else.
TEST(VecDotKernels, MultiRowAndMultiColumnCallsEqualSingleRowCalls) {
  std::mt19937 rng(99);
  std::vector<GgmlType> types = {GgmlType::F32, GgmlType::F16, GgmlType::BF16};
  for (const Case& c : block_cases()) types.push_back(c.type);
  for (GgmlType t : types) {
    const GgmlType act = q::vec_dot_type(t);
    const int64_t n = (is_float_type(t) ? 37 : 9) * ggml_traits(t).block_size;
    constexpr int64_t kRows = 7,
                      kCols = 6;  // 4-row tiles and a 3-row tail; 4-column tiles and single columns
    const Fill fill = is_float_type(t) ? Fill::kQuantized : Fill::kRandomBytes;
    // Rows of W and of the activations at padded strides (multiples of 4 bytes: the references read F32 and
    // F16 rows as arrays of their element type).
    const size_t w_bytes = ggml_row_bytes(t, n), a_bytes = ggml_row_bytes(act, n);
    const size_t w_stride = w_bytes + 4, a_stride = a_bytes + 12;
    const auto w_packed = make_weights(t, kRows, n, fill, rng);
    const auto a_packed = make_acts(act, kCols, n, fill, rng);
    std::vector<uint8_t> w(w_stride * kRows), a(a_stride * kCols);
    for (size_t r = 0; r < kRows; ++r) std::memcpy(&w[r * w_stride], &w_packed[r * w_bytes], w_bytes);
    for (size_t col = 0; col < kCols; ++col)
      std::memcpy(&a[col * a_stride], &a_packed[col * a_bytes], a_bytes);
    for (SimdLevel level : supported_levels()) {
      const VecDotKernels& k = vec_dot_kernels(t, level);
      for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{4}, kRows}) {
        for (int64_t cols : {int64_t{1}, kCols}) {
          const size_t out_stride = static_cast<size_t>(rows) + 2;
          std::vector<float> out(out_stride * static_cast<size_t>(cols) + 1, -12345.0f);
          k.gemm(w.data(), w_stride, rows, a.data(), a_stride, cols, n, out.data(), out_stride);
          for (int64_t col = 0; col < cols; ++col) {
            for (size_t r = 0; r < out_stride; ++r) {
              const float got = out[static_cast<size_t>(col) * out_stride + r];
              if (r >= static_cast<size_t>(rows)) {
                EXPECT_EQ(got, -12345.0f) << "gemm wrote outside its tile";
                continue;
              }
              const float single =
                  k.dot(w.data() + r * w_stride, a.data() + static_cast<size_t>(col) * a_stride, n);
              ASSERT_TRUE(same_float(got, single))
                  << ggml_type_name(t) << " at " << simd_level_name(level) << ": rows=" << rows
                  << " cols=" << cols << " r=" << r << " c=" << col << ": " << got << " vs " << single;
            }
          }
          EXPECT_EQ(out.back(), -12345.0f);
        }
      }
    }
  }
}

TEST(VecDotKernels, EmptyRowsGiveZero) {
  for (SimdLevel level : supported_levels()) {
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::F16}) {
      const uint8_t dummy[4] = {};
      EXPECT_EQ(vec_dot_kernels(t, level).dot(dummy, dummy, 0), 0.0f) << ggml_type_name(t);
    }
  }
}

TEST(VecDotKernels, ReportsTheLevelsTested) {
  std::string tested;
  for (SimdLevel level : supported_levels()) tested += std::string(simd_level_name(level)) + " ";
  RecordProperty("levels", tested);
  std::printf("SIMD levels tested on this machine: %s\n", tested.c_str());
  EXPECT_TRUE(simd_level_supported(SimdLevel::kScalar));
}

}  // namespace
}  // namespace df::kernels

// The Q4_0x16 gemm of every SIMD level this machine supports (scalar always) against the scalar Q4_0 gemm of
// the unpacked rows: bit for bit, for quantized rows, random bytes with special scales, all-0 / all-1 codes
// against -128 / +127 activations; one block to rows longer than the kernels' 128-block chunk; 1 to 9
// activation rows; padded output strides that must not be written.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernels/vec_dot.h"
#include "quant/q4_0x16.h"
#include "quant/quant.h"

namespace df::kernels {
namespace {

namespace q = df::quant;

enum class Fill { kQuantized, kRandomBytes, kLowQuants, kHighQuants };

uint16_t pick_half(std::mt19937& rng) {
  static constexpr uint16_t kSpecial[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x0400,
                                          0x3C00, 0xB800, 0x7BFF, 0xFBFF};
  const uint32_t r = rng();
  if (r % 3 == 0) return kSpecial[(r / 3) % std::size(kSpecial)];
  uint16_t h;
  do h = static_cast<uint16_t>(rng());
  while ((h & 0x7C00) == 0x7C00);
  return h;
}

std::vector<uint8_t> make_rows(GgmlType t, int64_t rows, int64_t n, Fill fill, bool activation,
                               std::mt19937& rng) {
  const size_t row_bytes = ggml_row_bytes(t, n);
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  if (fill == Fill::kQuantized) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : x) v = dist(rng) * (0.1f + r);
      uint8_t* dst = out.data() + static_cast<size_t>(r) * row_bytes;
      if (activation) {
        q::quantize_activation(t, x.data(), dst, n);
      } else {
        q::quantize_row(t, x.data(), dst, n);
      }
    }
    return out;
  }
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  const size_t block = activation ? sizeof(q::BlockQ8_0) : sizeof(q::BlockQ4_0);
  for (size_t off = 0; off < out.size(); off += block) {
    const uint16_t d = pick_half(rng);
    std::memcpy(&out[off], &d, 2);
    if (fill == Fill::kLowQuants) std::memset(&out[off + 2], activation ? 0x80 : 0x00, block - 2);
    if (fill == Fill::kHighQuants) std::memset(&out[off + 2], activation ? 0x7F : 0xFF, block - 2);
  }
  return out;
}

TEST(Q4_0x16Kernels, PackedGemmEqualsTheScalarGemmOfTheRowsBitForBit) {
  std::mt19937 rng(424242);
  const VecDotKernels& reference = vec_dot_kernels(GgmlType::Q4_0, SimdLevel::kScalar);
  int checked_levels = 0;
  for (SimdLevel level : kAllSimdLevels) {
    if (!simd_level_supported(level)) continue;
    ++checked_levels;
    const VecDotKernels& k = vec_dot_kernels(GgmlType::Q4_0, level);
    ASSERT_NE(k.packed_gemm, nullptr);
    EXPECT_EQ(k.packed_level, level) << "every level has its own Q4_0x16 kernel";
    for (Fill fill : {Fill::kQuantized, Fill::kRandomBytes, Fill::kLowQuants, Fill::kHighQuants}) {
      for (int64_t nb : {1, 3, 8, 127, 128, 129, 300}) {
        const int64_t n = nb * q::QK4_0;
        const int64_t rows = nb > 100 ? 32 : 48;
        const int64_t cols = nb > 100 ? 5 : 9;
        const size_t w_row = ggml_row_bytes(GgmlType::Q4_0, n), a_row = ggml_row_bytes(GgmlType::Q8_0, n);
        const auto w = make_rows(GgmlType::Q4_0, rows, n, fill, false, rng);
        std::vector<uint8_t> packed(w.size());
        q::pack_q4_0x16(w.data(), rows, n, packed.data());
        // Activation rows at a padded stride.
        const size_t a_stride = a_row + 6;
        const auto a_rows = make_rows(GgmlType::Q8_0, cols, n, fill, true, rng);
        std::vector<uint8_t> a(a_stride * static_cast<size_t>(cols));
        for (int64_t c = 0; c < cols; ++c)
          std::memcpy(&a[static_cast<size_t>(c) * a_stride], &a_rows[static_cast<size_t>(c) * a_row], a_row);
        for (int64_t c_count : {int64_t{1}, int64_t{2}, int64_t{4}, cols}) {
          const size_t out_stride = static_cast<size_t>(rows) + 3;
          std::vector<float> want(out_stride * static_cast<size_t>(c_count), -7.0f), got = want;
          reference.gemm(w.data(), w_row, rows, a.data(), a_stride, c_count, n, want.data(), out_stride);
          k.packed_gemm(packed.data(), w_row, rows, a.data(), a_stride, c_count, n, got.data(), out_stride);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
                << simd_level_name(level) << " fill " << static_cast<int>(fill) << " nb=" << nb
                << " cols=" << c_count << " output " << i << ": " << got[i] << " vs " << want[i];
        }
        // A later group on its own (the backend starts tasks at any group).
        std::vector<float> want(static_cast<size_t>(16)), got(static_cast<size_t>(16));
        reference.gemm(w.data() + 16 * w_row, w_row, 16, a.data(), a_stride, 1, n, want.data(), 16);
        k.packed_gemm(packed.data() + 16 * w_row, w_row, 16, a.data(), a_stride, 1, n, got.data(), 16);
        for (size_t i = 0; i < 16; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
              << simd_level_name(level);
      }
    }
  }
  EXPECT_GE(checked_levels, 1);
}

TEST(Q4_0x16Kernels, OnlyQ4_0HasAPackedGemm) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q6_K, GgmlType::F16})
    EXPECT_EQ(vec_dot_kernels(t, SimdLevel::kScalar).packed_gemm, nullptr) << ggml_type_name(t);
}

}  // namespace
}  // namespace df::kernels

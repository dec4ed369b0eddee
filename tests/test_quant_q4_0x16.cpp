// Q4_0x16 repacking (quant/q4_0x16.h): an exact permutation of the Q4_0 bytes, with a reference dot product
// equal to the Q4_0 one bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>
#include <vector>

#include "quant/q4_0x16.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::quant {
namespace {

std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Random codes, finite f16 scales.
std::vector<uint8_t> random_q4_0(int64_t rows, int64_t n_in, std::mt19937& rng) {
  auto v = random_bytes(ggml_row_bytes(GgmlType::Q4_0, n_in) * static_cast<size_t>(rows), rng);
  for (size_t off = 0; off < v.size(); off += sizeof(BlockQ4_0)) {
    uint16_t d;
    do d = static_cast<uint16_t>(rng());
    while ((d & 0x7C00) == 0x7C00);
    std::memcpy(&v[off], &d, 2);
  }
  return v;
}

TEST(Q4_0x16, PackingIsAPermutationThatUnpackingUndoes) {
  std::mt19937 rng(7);
  for (int64_t rows : {16, 32, 80}) {
    for (int64_t nb : {1, 2, 7, 64}) {
      const int64_t n_in = nb * QK4_0;
      const auto rows_bytes =
          random_bytes(ggml_row_bytes(GgmlType::Q4_0, n_in) * static_cast<size_t>(rows), rng);
      std::vector<uint8_t> packed(rows_bytes.size()), back(rows_bytes.size());
      pack_q4_0x16(rows_bytes.data(), rows, n_in, packed.data());
      unpack_q4_0x16(packed.data(), rows, n_in, back.data());
      EXPECT_EQ(back, rows_bytes) << rows << " x " << n_in;
      // A permutation: same multiset of bytes, and not the identity (16 rows do move).
      auto a = rows_bytes, b = packed;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b);
      EXPECT_NE(packed, rows_bytes);
      // In place, through a one-group buffer, gives the same bytes.
      auto in_place = rows_bytes;
      std::vector<uint8_t> group(ggml_row_bytes(GgmlType::Q4_0, n_in) * kQ4_0x16Rows);
      pack_q4_0x16_in_place(in_place.data(), rows, n_in, group.data());
      EXPECT_EQ(in_place, packed);
    }
  }
}

// convert_packing (the expert tiers' copy between the store's packing and a backend's): the same bytes as
// pack/unpack, a plain copy between equal packings, and an error for a packing a type does not have.
TEST(Q4_0x16, ConvertPackingMatchesPackAndUnpackAndRefusesOtherTypes) {
  std::mt19937 rng(11);
  const int64_t rows = 32, n_in = 4 * QK4_0;
  const auto src = random_bytes(ggml_row_bytes(GgmlType::Q4_0, n_in) * rows, rng);
  std::vector<uint8_t> packed(src.size()), converted(src.size()), back(src.size());
  pack_q4_0x16(src.data(), rows, n_in, packed.data());
  convert_packing(src.data(), GgmlType::Q4_0, rows, n_in, RowPacking::kNone, RowPacking::kQ4_0x16,
                  converted.data());
  EXPECT_EQ(converted, packed);
  convert_packing(converted.data(), GgmlType::Q4_0, rows, n_in, RowPacking::kQ4_0x16, RowPacking::kNone,
                  back.data());
  EXPECT_EQ(back, src);
  std::vector<uint8_t> copy(src.size());
  convert_packing(src.data(), GgmlType::Q4_0, rows, n_in, RowPacking::kNone, RowPacking::kNone, copy.data());
  EXPECT_EQ(copy, src);
  const size_t q8_bytes = ggml_row_bytes(GgmlType::Q8_0, n_in) * rows;
  std::vector<uint8_t> q8(q8_bytes), q8_out(q8_bytes);
  EXPECT_THROW(convert_packing(q8.data(), GgmlType::Q8_0, rows, n_in, RowPacking::kNone, RowPacking::kQ4_0x16,
                               q8_out.data()),
               df::Error);
}

TEST(Q4_0x16, LayoutPutsTheSameBytesOfSixteenRowsTogether) {
  std::mt19937 rng(8);
  const int64_t rows = 32, nb = 3, n_in = nb * QK4_0;
  const auto src = random_bytes(ggml_row_bytes(GgmlType::Q4_0, n_in) * rows, rng);
  std::vector<uint8_t> packed(src.size());
  pack_q4_0x16(src.data(), rows, n_in, packed.data());
  const auto* in = reinterpret_cast<const BlockQ4_0*>(src.data());
  const auto* out = reinterpret_cast<const BlockQ4_0x16*>(packed.data());
  for (int64_t g = 0; g < rows / 16; ++g)
    for (int64_t k = 0; k < nb; ++k)
      for (int r = 0; r < 16; ++r) {
        const BlockQ4_0& b = in[(g * 16 + r) * nb + k];
        EXPECT_EQ(out[g * nb + k].d[r], b.d);
        for (int j = 0; j < 4; ++j)
          for (int i = 0; i < 4; ++i) EXPECT_EQ(out[g * nb + k].qs[j][r][i], b.qs[4 * j + i]);
      }
  std::vector<BlockQ4_0> row(nb);
  unpack_q4_0x16_row(packed.data() + 16 * ggml_row_bytes(GgmlType::Q4_0, n_in), nb, 5, row.data());
  EXPECT_EQ(std::memcmp(row.data(), in + (16 + 5) * nb, nb * sizeof(BlockQ4_0)), 0);
}

TEST(Q4_0x16, ReferenceDotEqualsTheQ4_0DotBitForBit) {
  std::mt19937 rng(9);
  for (int64_t nb : {1, 5, 33}) {
    const int64_t n_in = nb * QK4_0;
    const auto w = random_q4_0(16, n_in, rng);
    std::vector<uint8_t> packed(w.size());
    pack_q4_0x16(w.data(), 16, n_in, packed.data());
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<float> x(static_cast<size_t>(n_in));
      std::normal_distribution<float> dist(0.0f, 1.0f + trial);
      for (auto& v : x) v = dist(rng);
      std::vector<uint8_t> act(ggml_row_bytes(GgmlType::Q8_0, n_in));
      quantize_activation(GgmlType::Q8_0, x.data(), act.data(), n_in);
      if (trial == 3)  // extreme activations
        for (size_t off = 0; off < act.size(); off += sizeof(BlockQ8_0)) std::memset(&act[off + 2], 0x80, 32);
      for (int r = 0; r < 16; ++r) {
        const float want =
            vec_dot(GgmlType::Q4_0, w.data() + r * ggml_row_bytes(GgmlType::Q4_0, n_in), act.data(), n_in);
        const float got =
            dot_q4_0x16_row(packed.data(), r, reinterpret_cast<const BlockQ8_0*>(act.data()), nb);
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << "nb=" << nb << " r=" << r;
      }
    }
  }
}

TEST(Q4_0x16, ChosenOnlyForQ4_0WithWholeGroupsAndBadShapesThrow) {
  EXPECT_EQ(preferred_packing(GgmlType::Q4_0, 16), RowPacking::kQ4_0x16);
  EXPECT_EQ(preferred_packing(GgmlType::Q4_0, 2048), RowPacking::kQ4_0x16);
  EXPECT_EQ(preferred_packing(GgmlType::Q4_0, 24), RowPacking::kNone);
  EXPECT_EQ(preferred_packing(GgmlType::Q4_0, 0), RowPacking::kNone);
  EXPECT_EQ(preferred_packing(GgmlType::Q8_0, 32), RowPacking::kNone);
  EXPECT_EQ(preferred_packing(GgmlType::Q6_K, 32), RowPacking::kNone);
  RowPacking p;
  EXPECT_TRUE(parse_row_packing("q4_0x16", p));
  EXPECT_EQ(p, RowPacking::kQ4_0x16);
  EXPECT_TRUE(parse_row_packing(row_packing_name(RowPacking::kNone), p));
  EXPECT_EQ(p, RowPacking::kNone);
  EXPECT_FALSE(parse_row_packing("q4_0x8", p));
  std::vector<uint8_t> a(18 * 24), b(18 * 24);
  EXPECT_THROW(pack_q4_0x16(a.data(), 24, 32, b.data()), Error);
  EXPECT_THROW(pack_q4_0x16(a.data(), 16, 33, b.data()), Error);
  EXPECT_THROW(unpack_q4_0x16(a.data(), 0, 32, b.data()), Error);
}

}  // namespace
}  // namespace df::quant

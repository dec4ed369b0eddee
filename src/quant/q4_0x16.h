#pragma once
// Q4_0x16: Q4_0 rows repacked sixteen at a time, so that one SIMD register holds the same four bytes of
// sixteen rows and one broadcast activation word feeds all of them (ARCHITECTURE.md "Repacked Q4_0").
// Same bytes as the Q4_0 rows (18 per block and row), same values, another order:
//
//   a matrix of n_out rows (n_out a multiple of 16) of nb = n_in / 32 blocks is n_out / 16 groups, group g
//   holding rows 16g .. 16g + 15 in 16 * row_bytes bytes at g * 16 * row_bytes (so a group starts where
//   its first row started); a group is nb consecutive 288-byte blocks, block k being
//     d[16]       (uint16 f16)  the scales of block k of rows 0..15
//     qs[4][16][4] (uint8)      qs[j][r][i] = byte 4j + i of block k of row r (low nibble: element 4j + i,
//                               high nibble: element 16 + 4j + i, as in Q4_0)
//
// Repacking is an exact permutation: unpack(pack(x)) == x byte for byte, and the dot products of the
// packed kernels equal those of the Q4_0 rows bit for bit.
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"
#include "quant/quant.h"

namespace df::quant {

// How the rows of a weight matrix are laid out in memory.
enum class RowPacking : uint8_t {
  kNone,     // ggml's layout: rows of blocks, one after the other
  kQ4_0x16,  // Q4_0 rows repacked as above
};

inline constexpr int kQ4_0x16Rows = 16;

#pragma pack(push, 1)
struct BlockQ4_0x16 {
  uint16_t d[kQ4_0x16Rows];
  uint8_t qs[4][kQ4_0x16Rows][4];
};
#pragma pack(pop)
static_assert(sizeof(BlockQ4_0x16) == kQ4_0x16Rows * sizeof(BlockQ4_0));

// "none" / "q4_0x16"; parse returns false for any other name.
const char* row_packing_name(RowPacking p);
bool parse_row_packing(std::string_view name, RowPacking& out);

// The packing diskformer uses for a matrix of this type and row count: Q4_0x16 for Q4_0 with a positive
// multiple of 16 rows, none otherwise.
RowPacking preferred_packing(GgmlType type, int64_t n_out);

// Repacks n_out Q4_0 rows of n_in values (n_out a multiple of 16, n_in of 32) from `rows` to `packed`
// (both row_bytes * n_out bytes; they must not overlap), and back.
void pack_q4_0x16(const void* rows, int64_t n_out, int64_t n_in, void* packed);
void unpack_q4_0x16(const void* packed, int64_t n_out, int64_t n_in, void* rows);
// n_out rows of n_in values of `type` from packing `from` at src to packing `to` at dst (the same number of
// bytes; they must not overlap): a copy when the packings agree, else pack/unpack; df::Error for a packing
// that does not exist for the type.
void convert_packing(const void* src, GgmlType type, int64_t n_out, int64_t n_in, RowPacking from,
                     RowPacking to, void* dst);
// In place, through a caller-provided buffer of one group (16 * row_bytes bytes).
void pack_q4_0x16_in_place(void* data, int64_t n_out, int64_t n_in, void* group_buffer);

// Row r (0..15) of the group at `group`, nb blocks, back to Q4_0 blocks.
void unpack_q4_0x16_row(const void* group, int64_t nb, int r, BlockQ4_0* out);

// The scalar reference: row r of a group against one Q8_0 activation row of nb blocks, with
// dot_q4_0_q8_0's operations in its order (so equal to quant::vec_dot of the unpacked row, bit for bit).
float dot_q4_0x16_row(const void* group, int r, const BlockQ8_0* act, int64_t nb);

}  // namespace df::quant

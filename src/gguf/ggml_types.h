#pragma once
// ggml tensor type ids and their block geometry: facts of the GGUF file format (ARCHITECTURES.md 11.2).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace df {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;
  uint32_t block_size;  // values per block
  uint32_t type_size;   // bytes per block
};

// nullopt for ids that are not known (or were removed from ggml).
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id);
const GgmlTypeTraits& ggml_traits(GgmlType t);  // t must be known
std::string_view ggml_type_name(GgmlType t);
std::optional<GgmlType> ggml_type_from_name(std::string_view name);  // "Q4_0", "q4_0", ...

// Bytes of one row of n values; n must be a multiple of the block size.
inline size_t ggml_row_bytes(GgmlType t, int64_t n) {
  const auto& tr = ggml_traits(t);
  return static_cast<size_t>(n / tr.block_size) * tr.type_size;
}

}  // namespace df

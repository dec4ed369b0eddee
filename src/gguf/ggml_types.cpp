#include "gguf/ggml_types.h"

#include <array>
#include <cctype>
#include <string>

#include "util/error.h"

namespace df {
namespace {

constexpr std::array<GgmlTypeTraits, 20> kTraits{{
    {GgmlType::F32, "F32", 1, 4},      {GgmlType::F16, "F16", 1, 2},       {GgmlType::Q4_0, "Q4_0", 32, 18},
    {GgmlType::Q4_1, "Q4_1", 32, 20},  {GgmlType::Q5_0, "Q5_0", 32, 22},   {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::Q8_0, "Q8_0", 32, 34},  {GgmlType::Q8_1, "Q8_1", 32, 36},   {GgmlType::Q2_K, "Q2_K", 256, 84},
    {GgmlType::Q3_K, "Q3_K", 256, 110}, {GgmlType::Q4_K, "Q4_K", 256, 144}, {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::Q6_K, "Q6_K", 256, 210}, {GgmlType::Q8_K, "Q8_K", 256, 292}, {GgmlType::I8, "I8", 1, 1},
    {GgmlType::I16, "I16", 1, 2},      {GgmlType::I32, "I32", 1, 4},       {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},      {GgmlType::BF16, "BF16", 1, 2},
}};
constexpr GgmlTypeTraits kMxfp4{GgmlType::MXFP4, "MXFP4", 32, 17};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
  if (id == static_cast<uint32_t>(GgmlType::MXFP4)) return kMxfp4;
  for (const auto& t : kTraits)
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

const GgmlTypeTraits& ggml_traits(GgmlType t) {
  if (t == GgmlType::MXFP4) return kMxfp4;
  for (const auto& tr : kTraits)
    if (tr.type == t) return tr;
  fail("unknown ggml type id {}", static_cast<uint32_t>(t));
}

std::string_view ggml_type_name(GgmlType t) { return ggml_traits(t).name; }

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  std::string up(name);
  for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (up == "MXFP4") return GgmlType::MXFP4;
  for (const auto& t : kTraits)
    if (t.name == up) return t.type;
  return std::nullopt;
}

}  // namespace df

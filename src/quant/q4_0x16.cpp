#include "quant/q4_0x16.h"

#include <cstring>
#include <string_view>

#include "util/error.h"

namespace df::quant {
namespace {

void check_shape(int64_t n_out, int64_t n_in) {
  if (n_out <= 0 || n_out % kQ4_0x16Rows != 0 || n_in <= 0 || n_in % QK4_0 != 0)
    fail(
        "Q4_0x16 repacking needs a positive multiple of {} rows of a positive multiple of {} values, got {} "
        "x {}",
        kQ4_0x16Rows, QK4_0, n_out, n_in);
}

}  // namespace

const char* row_packing_name(RowPacking p) { return p == RowPacking::kQ4_0x16 ? "q4_0x16" : "none"; }

bool parse_row_packing(std::string_view name, RowPacking& out) {
  if (name == "none") {
    out = RowPacking::kNone;
    return true;
  }
  if (name == "q4_0x16") {
    out = RowPacking::kQ4_0x16;
    return true;
  }
  return false;
}

RowPacking preferred_packing(GgmlType type, int64_t n_out) {
  return type == GgmlType::Q4_0 && n_out > 0 && n_out % kQ4_0x16Rows == 0 ? RowPacking::kQ4_0x16
                                                                          : RowPacking::kNone;
}

void pack_q4_0x16(const void* rows, int64_t n_out, int64_t n_in, void* packed) {
  check_shape(n_out, n_in);
  const int64_t nb = n_in / QK4_0;
  const auto* src = static_cast<const BlockQ4_0*>(rows);
  auto* dst = static_cast<BlockQ4_0x16*>(packed);
  for (int64_t g = 0; g < n_out / kQ4_0x16Rows; ++g) {
    for (int64_t k = 0; k < nb; ++k) {
      BlockQ4_0x16& out = dst[g * nb + k];
      for (int r = 0; r < kQ4_0x16Rows; ++r) {
        const BlockQ4_0& in = src[(g * kQ4_0x16Rows + r) * nb + k];
        out.d[r] = in.d;
        for (int j = 0; j < 4; ++j) std::memcpy(out.qs[j][r], in.qs + 4 * j, 4);
      }
    }
  }
}

void unpack_q4_0x16_row(const void* group, int64_t nb, int r, BlockQ4_0* out) {
  const auto* src = static_cast<const BlockQ4_0x16*>(group);
  for (int64_t k = 0; k < nb; ++k) {
    out[k].d = src[k].d[r];
    for (int j = 0; j < 4; ++j) std::memcpy(out[k].qs + 4 * j, src[k].qs[j][r], 4);
  }
}

void unpack_q4_0x16(const void* packed, int64_t n_out, int64_t n_in, void* rows) {
  check_shape(n_out, n_in);
  const int64_t nb = n_in / QK4_0;
  const auto* src = static_cast<const BlockQ4_0x16*>(packed);
  auto* dst = static_cast<BlockQ4_0*>(rows);
  for (int64_t g = 0; g < n_out / kQ4_0x16Rows; ++g)
    for (int r = 0; r < kQ4_0x16Rows; ++r)
      unpack_q4_0x16_row(src + g * nb, nb, r, dst + (g * kQ4_0x16Rows + r) * nb);
}

void pack_q4_0x16_in_place(void* data, int64_t n_out, int64_t n_in, void* group_buffer) {
  check_shape(n_out, n_in);
  const size_t group_bytes = static_cast<size_t>(n_in / QK4_0) * sizeof(BlockQ4_0x16);
  auto* p = static_cast<uint8_t*>(data);
  for (int64_t g = 0; g < n_out / kQ4_0x16Rows; ++g, p += group_bytes) {
    std::memcpy(group_buffer, p, group_bytes);
    pack_q4_0x16(group_buffer, kQ4_0x16Rows, n_in, p);
  }
}

float dot_q4_0x16_row(const void* group, int r, const BlockQ8_0* act, int64_t nb) {
  const auto* w = static_cast<const BlockQ4_0x16*>(group);
  float sum = 0.0f;
  for (int64_t k = 0; k < nb; ++k) {
    int sum_lo = 0, sum_hi = 0;
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        const uint8_t q = w[k].qs[j][r][i];
        sum_lo += ((q & 0x0F) - 8) * act[k].qs[4 * j + i];
        sum_hi += ((q >> 4) - 8) * act[k].qs[16 + 4 * j + i];
      }
    }
    sum += static_cast<float>(sum_lo + sum_hi) * fp16_to_fp32(w[k].d[r]) * fp16_to_fp32(act[k].d);
  }
  return sum;
}

}  // namespace df::quant

namespace df::quant {

void convert_packing(const void* src, GgmlType type, int64_t n_out, int64_t n_in, RowPacking from,
                     RowPacking to, void* dst) {
  if (from == to) {
    std::memcpy(dst, src, ggml_row_bytes(type, n_in) * static_cast<size_t>(n_out));
    return;
  }
  if (type != GgmlType::Q4_0)
    fail("no {} packing of {} rows (only Q4_0 is repacked)",
         row_packing_name(from == RowPacking::kNone ? to : from), ggml_type_name(type));
  if (from == RowPacking::kQ4_0x16)
    unpack_q4_0x16(src, n_out, n_in, dst);
  else
    pack_q4_0x16(src, n_out, n_in, dst);
}

}  // namespace df::quant

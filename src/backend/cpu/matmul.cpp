// Quantized matrix products: each activation row is converted once to the weight's vec_dot type, then every
// output element is one quant::vec_dot (the scalar reference), the output rows split over the pool.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/f16_table.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::backend {
namespace {

bool is_matmul_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::MXFP4:
      return true;
    default:
      return false;
  }
}

// Enough work per slice that waking a thread pays off.
constexpr int64_t kMinMacsPerSlice = 1 << 15;

}  // namespace

bool CpuBackend::supports_matmul(GgmlType w) const { return is_matmul_type(w); }

size_t CpuBackend::matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const {
  if (!is_matmul_type(w)) fail("cpu backend: no matmul for weight type {}", ggml_type_name(w));
  return ggml_row_bytes(quant::vec_dot_type(w), n_in) * static_cast<size_t>(rows);
}

void CpuBackend::matmul(const Weight& w, const float* x, int64_t rows, float* y, std::span<uint8_t> scratch) {
  if (rows <= 0 || w.n_out <= 0) return;
  const size_t need = matmul_scratch_bytes(w.type, w.n_in, rows);
  if (scratch.size() < need)
    fail("cpu backend: matmul scratch of {} bytes, {} needed ({} rows of {} {} values)", scratch.size(), need,
         rows, w.n_in, ggml_type_name(w.type));
  const GgmlType act = quant::vec_dot_type(w.type);
  const int64_t n_in = w.n_in, n_out = w.n_out;
  const size_t act_row = ggml_row_bytes(act, n_in);
  uint8_t* qx = scratch.data();

  pool_.parallel_for(
      rows, std::max<int64_t>(1, kMinMacsPerSlice / std::max<int64_t>(1, n_in)), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
          quant::quantize_activation(act, x + r * n_in, qx + static_cast<size_t>(r) * act_row, n_in);
      });

  const int64_t grain = std::max<int64_t>(1, kMinMacsPerSlice / std::max<int64_t>(1, n_in * rows));
  if (w.type == GgmlType::F16) {
    // Same arithmetic as quant::vec_dot (exact float products, sequential double sum), with a table
    // instead of a conversion call per element.
    const float* f16 = f16_to_f32_table();
    pool_.parallel_for(n_out, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const auto* wr = reinterpret_cast<const uint16_t*>(w.row(o));
        for (int64_t r = 0; r < rows; ++r)
          y[r * n_out + o] = dot_f16(
              f16, wr, reinterpret_cast<const uint16_t*>(qx + static_cast<size_t>(r) * act_row), n_in);
      }
    });
    return;
  }
  pool_.parallel_for(n_out, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const uint8_t* wr = w.row(o);
      for (int64_t r = 0; r < rows; ++r)
        y[r * n_out + o] = quant::vec_dot(w.type, wr, qx + static_cast<size_t>(r) * act_row, n_in);
    }
  });
}

void CpuBackend::get_rows(const Weight& table, std::span<const int32_t> ids, float* out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= table.n_out)
      fail("token id {} is out of range (vocabulary of {})", ids[i], table.n_out);
    quant::dequantize_row(table.type, table.row(ids[i]), out + static_cast<int64_t>(i) * table.n_in,
                          table.n_in);
  }
}

}  // namespace df::backend

// Construction and the elementwise ops.
#include "backend/cpu/cpu_backend.h"

#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "backend/cpu/gemm_tiling.h"
#include "backend/cpu/host_record_slots.h"
#include "backend/cpu/kernels/weight_streams.h"
#include "util/argmax.h"
#include "util/error.h"
#include "util/huge_page_buffer.h"

namespace df::backend {

CpuBackend::CpuBackend(int n_threads) : CpuBackend(n_threads, kernels::select_simd_level()) {}

CpuBackend::CpuBackend(int n_threads, kernels::SimdLevel level) : pool_(n_threads), level_(level) {
  if (!kernels::simd_level_supported(level))
    fail("cpu backend: SIMD level {} is not supported by this CPU (the best it supports is {})",
         kernels::simd_level_name(level), kernels::simd_level_name(kernels::best_simd_level()));
  pool_.count_busy_time(profile_.on());
  kernels::weight_streams();  // a malformed DF_Q4_0X16_* setting is refused here, not inside a job
}

void CpuBackend::swiglu(Buf<const float> gate_buf, Buf<const float> up_buf, int64_t n, Buf<float> y_buf) {
  const auto timer = timed({"swiglu"});
  const float *gate = detail::raw(gate_buf.first(n)), *up = detail::raw(up_buf.first(n));
  float* y = detail::raw(y_buf.first(n));
  for (int64_t i = 0; i < n; ++i) y[i] = detail::silu_mul(gate[i], up[i]);
}

void CpuBackend::add(Buf<float> x_buf, Buf<const float> y_buf, int64_t n) {
  const auto timer = timed({"add"});
  float* x = detail::raw(x_buf.first(n));
  const float* y = detail::raw(y_buf.first(n));
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void CpuBackend::gather_rows(Buf<const float> table_buf, int64_t width, Buf<const int32_t> ids_buf, int64_t n,
                             Buf<float> out_buf) {
  const auto timer = timed({"gather_rows"});
  if (n <= 0) return;
  if (width <= 0) fail("gather_rows: rows of {} values", width);
  const int64_t n_rows = static_cast<int64_t>(table_buf.size()) / width;
  const float* table = detail::raw(table_buf.first(static_cast<size_t>(n_rows * width)));
  const int32_t* ids = detail::raw(ids_buf.first(static_cast<size_t>(n)));
  float* out = detail::raw(out_buf.first(static_cast<size_t>(n * width)));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= n_rows)
      fail("gather_rows: row {} is outside a table of {} rows", ids[i], n_rows);
    std::memcpy(out + i * width, table + static_cast<int64_t>(ids[i]) * width,
                static_cast<size_t>(width) * sizeof(float));
  }
}

void CpuBackend::argmax(Buf<const float> x_buf, int64_t rows, int64_t n, Buf<int32_t> ids_buf) {
  const auto timer = timed({"argmax"});
  if (rows <= 0) return;
  if (n <= 0) fail("argmax: rows of {} values", n);
  const float* x = detail::raw(x_buf.first(static_cast<size_t>(rows * n)));
  int32_t* ids = detail::raw(ids_buf.first(static_cast<size_t>(rows)));
  for (int64_t r = 0; r < rows; ++r) ids[r] = first_argmax(std::span(x + r * n, static_cast<size_t>(n)));
}

void CpuBackend::add_bias_rows(Buf<float> x_buf, Buf<const float> bias_buf, int64_t rows, int64_t n) {
  const auto timer = timed({"add_bias_rows"});
  float* x = detail::raw(x_buf.first(rows * n));
  const float* bias = detail::raw(bias_buf.first(n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += bias[i];
}

// ggml_compute_forward_scale_f32 (ggml-cpu ops.cpp, bias 0): ggml_vec_scale_f32, y[i] *= v (SIMD
// products, one rounding each, so the same bits as this loop).
void CpuBackend::scale(Buf<float> x_buf, int64_t n, float s) {
  const auto timer = timed({"scale"});
  float* x = detail::raw(x_buf.first(static_cast<size_t>(n)));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

// ggml_compute_forward_mul_f32 with a one-row src1: ggml_vec_mul_f32 per row, z[i] = x[i] * y[i].
void CpuBackend::mul_rows(Buf<float> x_buf, Buf<const float> w_buf, int64_t rows, int64_t n) {
  const auto timer = timed({"mul_rows"});
  float* x = detail::raw(x_buf.first(static_cast<size_t>(rows * n)));
  const float* w = detail::raw(w_buf.first(static_cast<size_t>(n)));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] *= w[i];
}

namespace {
constexpr int64_t kSoftcapGrain = int64_t{1} << 14;  // values per task (a tanhf each)
}  // namespace

// llama.cpp's final softcapping (gemma4.cpp): ggml_scale(1.0f / cap), ggml_tanh (ggml-cpu unary-ops.cpp
// op_tanh: tanhf), ggml_scale(cap): three roundings, in that order.
void CpuBackend::softcap(Buf<float> x_buf, int64_t n, float cap) {
  const auto timer = timed({"softcap"});
  float* x = detail::raw(x_buf.first(static_cast<size_t>(n)));
  const float r = 1.0f / cap;
  pool_.parallel_for(n, kSoftcapGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = std::tanh(x[i] * r) * cap;
  });
}

quant::RowPacking CpuBackend::preferred_packing(GgmlType type, int64_t n_out) const {
  return quant::preferred_packing(type, n_out);
}

std::unique_ptr<RecordSlots> CpuBackend::make_record_slots(int n_slots, size_t record_bytes) {
  return std::make_unique<HostRecordSlots>(n_slots, record_bytes, &quant::preferred_packing);
}

// Buffers from a few KB up go on huge pages (the weights, the KV cache, the batch buffers of a prefill);
// the small ones (a decode step's rows, positions, routing ids) from the heap, 64-byte aligned.
namespace {
constexpr size_t kHugePageFrom = size_t{64} << 10;
constexpr size_t kAlign = 64;
}  // namespace

DeviceBuffer CpuBackend::alloc(size_t bytes, const char* what) {
  if (bytes == 0) return {};
  if (bytes >= kHugePageFrom)  // zeroed, as fresh mappings are
    return BufferAccess::adopt(this, HugePageBuffer(bytes, what).release_ownership(), bytes);
  void* p = ::operator new (bytes, std::align_val_t{kAlign}, std::nothrow);
  if (!p) fail("cpu backend: cannot allocate {} bytes for {}", bytes, what);
  std::memset(p, 0, bytes);
  return BufferAccess::adopt(this, p, bytes);
}

void CpuBackend::free_memory(void* data, size_t bytes) noexcept {
  if (bytes >= kHugePageFrom)
    HugePageBuffer::unmap(data, bytes);
  else
    ::operator delete (data, std::align_val_t{kAlign});
}

void CpuBackend::upload(Buf<uint8_t> dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(detail::raw(dst.first(bytes)), src, bytes);
}

void CpuBackend::download(void* dst, Buf<const uint8_t> src, size_t bytes) {
  if (bytes) std::memcpy(dst, detail::raw(src.first(bytes)), bytes);
}

void CpuBackend::queue_read_back(int slot, Buf<const uint8_t> src, size_t bytes) {
  check_read_back(slot, bytes);
  if (bytes)
    std::memcpy(read_back_slots_[static_cast<size_t>(slot)].data(), detail::raw(src.first(bytes)), bytes);
}

void CpuBackend::read_back(int slot, void* dst, size_t bytes) {
  check_read_back(slot, bytes);
  if (bytes) std::memcpy(dst, read_back_slots_[static_cast<size_t>(slot)].data(), bytes);
}

void CpuBackend::copy(Buf<uint8_t> dst, Buf<const uint8_t> src, size_t bytes) {
  if (bytes) std::memmove(detail::raw(dst.first(bytes)), detail::raw(src.first(bytes)), bytes);
}

void CpuBackend::fill_zero(Buf<uint8_t> dst, size_t bytes) {
  if (bytes) std::memset(detail::raw(dst.first(bytes)), 0, bytes);
}

UploadedWeights CpuBackend::upload_weights(const WeightSource& src) {
  if (src.n_matrices < 1 || src.n_in <= 0 || src.n_out <= 0)
    fail("cpu backend: upload_weights of {} matrices of {}x{}", src.n_matrices, src.n_out, src.n_in);
  const size_t row = ggml_row_bytes(src.type, src.n_in);
  const size_t slab = row * static_cast<size_t>(src.n_out);
  UploadedWeights w;
  w.memory = alloc(slab * static_cast<size_t>(src.n_matrices), "model weights");
  auto* bytes = static_cast<uint8_t*>(BufferAccess::data(w.memory));
  if (!src.read) fail("cpu backend: upload_weights without a source of bytes");
  src.read(bytes);
  const quant::RowPacking packing =
      src.rows_looked_up ? quant::RowPacking::kNone : preferred_packing(src.type, src.n_out);
  if (packing == quant::RowPacking::kQ4_0x16) {
    std::vector<uint8_t> group(row * quant::kQ4_0x16Rows);
    for (int64_t m = 0; m < src.n_matrices; ++m)
      quant::pack_q4_0x16_in_place(bytes + static_cast<size_t>(m) * slab, src.n_out, src.n_in, group.data());
  }
  w.first = Weight{src.type, bytes, src.n_in, src.n_out, packing};
  w.slab_bytes = slab;
  return w;
}

}  // namespace df::backend

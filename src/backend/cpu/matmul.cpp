// Quantized matrix products: each activation row is converted once to the weight's vec_dot format by the
// SIMD quantizer (byte-identical to quant::quantize_activation), then blocks of weight rows meet tiles of
// activation rows in the kernels' gemm, as tasks of one pool job.
#include <array>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tiling.h"
#include "backend/op_args.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::backend {
namespace {

using detail::Tiling;

// Quantizes `rows` rows of n values (x rows n apart) to dst rows dst_row bytes apart, over the pool when
// there is enough of it.
void quantize_rows(ThreadPool& pool, kernels::QuantizeFn quantize, const float* x, int64_t rows, int64_t n,
                   uint8_t* dst, size_t dst_row) {
  pool.parallel_for(rows, std::max<int64_t>(1, detail::kMinParallelQuantize / std::max<int64_t>(n, 1)),
                    [&](int64_t b, int64_t e) {
                      for (int64_t r = b; r < e; ++r)
                        quantize(x + r * n, dst + static_cast<size_t>(r) * dst_row, n);
                    });
}

// One task of a product: a block of weight rows against a tile of quantized activation rows.
void run_tile(const kernels::VecDotKernels& k, const Weight& w, const Tiling& t, int64_t task,
              const uint8_t* qx, size_t act_row, float* y) {
  const int64_t r0 = t.row_begin(task), c0 = t.token_begin(task);
  detail::gemm_of(k, w)(w.row(r0), w.row_bytes(), t.row_end(task) - r0,
                        qx + static_cast<size_t>(c0) * act_row, act_row, t.token_end(task) - c0, w.n_in,
                        y + c0 * w.n_out + r0, static_cast<size_t>(w.n_out));
}

}  // namespace

bool CpuBackend::supports_matmul(GgmlType w) const { return quant::has_vec_dot(w); }

size_t CpuBackend::matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const {
  if (!quant::has_vec_dot(w)) fail("cpu backend: no matmul for weight type {}", ggml_type_name(w));
  return ggml_row_bytes(quant::vec_dot_type(w), n_in) * static_cast<size_t>(rows);
}

void CpuBackend::matmul(const Weight& w, Buf<const float> x_buf, int64_t rows, Buf<float> y_buf,
                        Buf<uint8_t> scratch_buf) {
  const auto timer = timed({"matmul", ggml_type_name(w.type).data(), w.n_out, w.n_in, rows});
  if (rows <= 0 || w.n_out <= 0) return;
  const size_t need = matmul_scratch_bytes(w.type, w.n_in, rows);
  const std::span<uint8_t> scratch(detail::raw(scratch_buf), scratch_buf.size());
  const float* x = detail::raw(x_buf.first(static_cast<size_t>(rows * w.n_in)));
  float* y = detail::raw(y_buf.first(static_cast<size_t>(rows * w.n_out)));
  if (scratch.size() < need)
    fail("cpu backend: matmul scratch of {} bytes, {} needed ({} rows of {} {} values)", scratch.size(), need,
         rows, w.n_in, ggml_type_name(w.type));
  detail::check_weight(w);
  const kernels::VecDotKernels& k = kernels::vec_dot_kernels(w.type, level_);
  const size_t act_row = ggml_row_bytes(k.activation, w.n_in);
  quantize_rows(pool_, kernels::activation_quantizer(k.activation, level_), x, rows, w.n_in, scratch.data(),
                act_row);
  const Tiling t = detail::tile_product(
      w.n_out, rows, w.n_in, w.row_bytes(),
      detail::task_macs(w.n_out * rows * w.n_in, pool_, w.n_out * static_cast<int64_t>(w.row_bytes())),
      detail::row_align(w), /*taper=*/true);
  pool_.run_tasks(t.tasks(), [&](int, int64_t task) { run_tile(k, w, t, task, scratch.data(), act_row, y); });
}

void CpuBackend::matmul_add(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y, Buf<float> acc,
                            Buf<uint8_t> scratch) {
  matmul(w, x, rows, y, scratch);
  add(acc, y, rows * w.n_out);
}

void CpuBackend::norm_matmul_many(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight,
                                  float eps, Buf<float> xn, std::span<const MatmulTask> tasks) {
  check_norm_matmul_tasks(xn, n, tasks);
  rms_norm(x, rows, n, weight, eps, xn);
  matmul_many(tasks, rows);
}

void CpuBackend::matmul_many(std::span<const MatmulTask> tasks, int64_t rows) {
  const auto timer = timed({"matmul_many", nullptr, 0, 0, rows});
  if (tasks.size() > kMaxMatmulTasks)
    fail("cpu backend: matmul_many takes at most {} products, got {}", kMaxMatmulTasks, tasks.size());
  if (rows <= 0 || tasks.empty()) return;
  struct Product {
    const kernels::VecDotKernels* k = nullptr;
    size_t act_row = 0, act_offset = 0;
    bool quantizes = false;  // false: shares an earlier product's quantized rows
    Tiling tiling;
    int64_t first_task = 0;
  };
  std::array<Product, kMaxMatmulTasks> p;
  size_t bytes = 0;
  int64_t total_macs = 0, total_bytes = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Weight& w = tasks[i].w;
    if (!quant::has_vec_dot(w.type))
      fail("cpu backend: no matmul for weight type {}", ggml_type_name(w.type));
    detail::check_weight(w);
    p[i].k = &kernels::vec_dot_kernels(w.type, level_);
    p[i].act_row = ggml_row_bytes(p[i].k->activation, w.n_in);
    p[i].quantizes = true;
    detail::raw(tasks[i].x.first(static_cast<size_t>(rows * w.n_in)));  // range checks
    detail::raw(tasks[i].y.first(static_cast<size_t>(rows * w.n_out)));
    for (size_t j = 0; j < i; ++j) {
      if (p[j].quantizes && detail::raw(tasks[j].x) == detail::raw(tasks[i].x) && tasks[j].w.n_in == w.n_in &&
          p[j].k->activation == p[i].k->activation) {
        p[i].quantizes = false;
        p[i].act_offset = p[j].act_offset;
        break;
      }
    }
    if (p[i].quantizes) {
      p[i].act_offset = bytes;
      bytes += p[i].act_row * static_cast<size_t>(rows);
    }
    total_macs += w.n_out * rows * w.n_in;
    total_bytes += w.n_out * static_cast<int64_t>(w.row_bytes());
  }
  if (act_scratch_.size() < bytes) act_scratch_.resize(bytes);
  uint8_t* qx = act_scratch_.data();
  for (size_t i = 0; i < tasks.size(); ++i)
    if (p[i].quantizes)
      quantize_rows(pool_, kernels::activation_quantizer(p[i].k->activation, level_), detail::raw(tasks[i].x),
                    rows, tasks[i].w.n_in, qx + p[i].act_offset, p[i].act_row);

  const int64_t target = detail::task_macs(total_macs, pool_, total_bytes);
  int64_t n_tasks = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    p[i].tiling = detail::tile_product(tasks[i].w.n_out, rows, tasks[i].w.n_in, tasks[i].w.row_bytes(),
                                       target, detail::row_align(tasks[i].w), i + 1 == tasks.size());
    p[i].first_task = n_tasks;
    n_tasks += p[i].tiling.tasks();
  }
  pool_.run_tasks(n_tasks, [&](int, int64_t task) {
    size_t i = 0;
    while (i + 1 < tasks.size() && task >= p[i + 1].first_task) ++i;
    run_tile(*p[i].k, tasks[i].w, p[i].tiling, task - p[i].first_task, qx + p[i].act_offset, p[i].act_row,
             detail::raw(tasks[i].y));
  });
}

void CpuBackend::get_rows(const Weight& table, Buf<const int32_t> ids_buf, int64_t n, Buf<float> out_buf) {
  const auto timer = timed({"get_rows"});
  const std::span<const int32_t> ids(detail::raw(ids_buf.first(static_cast<size_t>(n))),
                                     static_cast<size_t>(n));
  float* out = detail::raw(out_buf.first(static_cast<size_t>(n * table.n_in)));
  if (table.packed())
    fail("cpu backend: get_rows on a {} table: row lookups need the unpacked layout",
         quant::row_packing_name(table.packing));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= table.n_out)
      fail("token id {} is out of range (vocabulary of {})", ids[i], table.n_out);
    quant::dequantize_row(table.type, table.row(ids[i]), out + static_cast<int64_t>(i) * table.n_in,
                          table.n_in);
  }
}

}  // namespace df::backend

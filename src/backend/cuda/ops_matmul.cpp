// Host side of the matrix products: checks, activation quantization into scratch, the launches, and the
// grouped FFN's task tables (staged to the device once per call through a pinned slot).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/buffer_access.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/op_args.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::backend {
namespace {

using BA = BufferAccess;

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// matmul_many's offset of a product whose kernel quantizes its own input (no activation scratch).
constexpr size_t kQuantizedInKernel = SIZE_MAX;

// The kernels' unit of a row: a block, or 8 (F16/BF16) / 4 (F32) values.
int64_t row_unit(GgmlType t) {
  if (t == GgmlType::F16 || t == GgmlType::BF16) return 8;
  if (t == GgmlType::F32) return 4;
  return ggml_traits(t).block_size;
}

// The decode products read a block's f16 scale with one 16-bit shared-memory load (matvec.cuh lds_half):
// rows of an even block size must start at even addresses (and routed experts be an even stride apart), as
// every allocation and slot does.
bool needs_even_address(GgmlType t) { return ggml_traits(t).type_size % 2 == 0; }

void check_weight(const Weight& w, const char* what) {
  if (!quant::has_vec_dot(w.type))
    fail("cuda backend: {}: no matmul for weight type {}", what, ggml_type_name(w.type));
  if (w.packed())
    fail("cuda backend: {}: a {}-packed weight; this backend reads the GGUF row layout only", what,
         quant::row_packing_name(w.packing));
  if (w.n_in <= 0 || w.n_in % row_unit(w.type) != 0)
    fail("cuda backend: {}: a {} row of {} values is not a whole number of {}-value units", what,
         ggml_type_name(w.type), w.n_in, row_unit(w.type));
  if (!w.data && w.n_out > 0) fail("cuda backend: {}: weight without data", what);
  if (needs_even_address(w.type) && reinterpret_cast<uintptr_t>(w.data) % 2 != 0)
    fail("cuda backend: {}: {} weight at an odd address", what, ggml_type_name(w.type));
}

template <class T>
void need(Buf<T> b, int64_t count, const char* what) {
  if (count < 0 || static_cast<size_t>(count) > b.size())
    fail("cuda backend: {} needs {} elements, its buffer view has {}", what, count, b.size());
}

}  // namespace

bool CudaBackend::supports_matmul(GgmlType w) const { return quant::has_vec_dot(w); }

size_t CudaBackend::matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const {
  if (!quant::has_vec_dot(w)) fail("cuda backend: no matmul for weight type {}", ggml_type_name(w));
  return cuda::act_row_stride(quant::vec_dot_type(w), n_in) * static_cast<size_t>(std::max<int64_t>(rows, 0));
}

void CudaBackend::quantize_rows(GgmlType act, const float* x, int64_t rows, int64_t n, void* dst) {
  cuda::launch_quantize(act, x, n, nullptr, rows, n, static_cast<uint8_t*>(dst), as_stream(stream_));
}

void CudaBackend::matmul(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y,
                         Buf<uint8_t> scratch) {
  const auto timer = timed({"matmul", ggml_type_name(w.type).data(), w.n_out, w.n_in, rows});
  if (rows <= 0 || w.n_out <= 0) return;
  check_weight(w, "matmul");
  matmul_rows(w, x, rows, y, scratch, false);
}

void CudaBackend::matmul_add(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y, Buf<float> acc,
                             Buf<uint8_t> scratch) {
  if (rows <= 0 || w.n_out <= 0) return;
  check_weight(w, "matmul_add");
  need(acc, rows * w.n_out, "matmul_add sums");
  if (!cuda::decode_matvec(w.type, rows)) {
    matmul(w, x, rows, y, scratch);
    add(acc, y, rows * w.n_out);
    return;
  }
  const auto timer = timed({"matmul_add", ggml_type_name(w.type).data(), w.n_out, w.n_in, rows});
  matmul_rows(w, x, rows, acc, scratch, true);
}

void CudaBackend::matmul_rows(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y,
                              Buf<uint8_t> scratch, bool accumulate) {
  need(x, rows * w.n_in, "matmul input");
  need(y, rows * w.n_out, "matmul output");
  const size_t bytes = matmul_scratch_bytes(w.type, w.n_in, rows);
  if (scratch.size() < bytes)
    fail("cuda backend: matmul scratch of {} bytes, {} needed ({} rows of {} {} values)", scratch.size(),
         bytes, rows, w.n_in, ggml_type_name(w.type));
  if (skip_op(accumulate ? "matmul_add" : "matmul", BA::raw(y), rows, w.n_out)) return;
  const GgmlType act = quant::vec_dot_type(w.type);
  const auto* act_rows = reinterpret_cast<const uint8_t*>(BA::raw(x));
  // F32 activations are the input rows themselves when those are laid out as the kernels read them (16-byte
  // aligned rows of whole 4-value units): no copy.
  const bool in_place = act == GgmlType::F32 && reinterpret_cast<uintptr_t>(act_rows) % 16 == 0 &&
                        cuda::act_row_stride(act, w.n_in) == static_cast<size_t>(w.n_in) * sizeof(float);
  // Decode rows of Q8_0 activations: quantized by the op that wrote them (quantized_input), or by the
  // kernel itself.
  const uint8_t* quantized = act == GgmlType::Q8_0 ? quantized_input(BA::raw(x), rows, w.n_in) : nullptr;
  if (quantized) {
    cuda::launch_matmul(w.type, static_cast<const uint8_t*>(w.data), w.row_bytes(), w.n_out, w.n_in,
                        quantized, cuda::act_row_stride(act, w.n_in), rows, BA::raw(y), w.n_out, nullptr,
                        as_stream(stream_), accumulate);
    return;
  }
  const bool in_kernel = cuda::in_kernel_quantize(w.type, BA::raw(x), w.n_in, w.n_in, rows);
  if (!in_place && !in_kernel) {
    quantize_rows(act, BA::raw(x), rows, w.n_in, BA::raw(scratch));
    act_rows = BA::raw(scratch);
  }
  cuda::launch_matmul(w.type, static_cast<const uint8_t*>(w.data), w.row_bytes(), w.n_out, w.n_in, act_rows,
                      cuda::act_row_stride(act, w.n_in), rows, BA::raw(y), w.n_out,
                      in_kernel ? BA::raw(x) : nullptr, as_stream(stream_), accumulate);
}

void CudaBackend::matmul_many(std::span<const MatmulTask> tasks, int64_t rows) {
  const auto timer = timed({"matmul_many", nullptr, 0, 0, rows});
  if (tasks.size() > max_matmul_tasks())
    fail("cuda backend: matmul_many takes at most {} products, got {}", max_matmul_tasks(), tasks.size());
  if (rows <= 0 || tasks.empty()) return;
  // Products reading the same x in the same activation format share its quantization, as on the CPU (decode
  // rows that the kernels quantize themselves excepted).
  using Quantized = MatmulManyHost::Quantized;
  auto& done = matmul_many_host_.done;
  auto& offset_of = matmul_many_host_.offset_of;
  done.clear();
  offset_of.resize(tasks.size());
  size_t bytes = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Weight& w = tasks[i].w;
    check_weight(w, "matmul_many");
    need(tasks[i].x, rows * w.n_in, "matmul_many input");
    need(tasks[i].y, rows * w.n_out, "matmul_many output");
    const GgmlType act = quant::vec_dot_type(w.type);
    const float* x = BA::raw(tasks[i].x);
    if (cuda::in_kernel_quantize(w.type, x, w.n_in, w.n_in, rows)) {  // the kernel quantizes x itself
      offset_of[i] = kQuantizedInKernel;
      continue;
    }
    auto it = std::find_if(done.begin(), done.end(),
                           [&](const Quantized& q) { return q.x == x && q.n_in == w.n_in && q.act == act; });
    if (it == done.end()) {
      done.push_back({x, w.n_in, act, bytes});
      offset_of[i] = bytes;
      bytes += cuda::act_row_stride(act, w.n_in) * static_cast<size_t>(rows);
    } else {
      offset_of[i] = it->offset;
    }
  }
  if (skip_op("matmul_many", BA::raw(tasks[0].y), rows, static_cast<int64_t>(tasks.size()))) return;
  // Nothing to quantize here when every kernel quantizes its own input (no scratch: a zero-byte grow would
  // count as a reallocation and keep the step out of the graphs).
  auto* base =
      bytes ? static_cast<uint8_t*>(grow(act_scratch_, bytes, "matmul_many activation scratch")) : nullptr;
  for (const Quantized& q : done) quantize_rows(q.act, q.x, rows, q.n_in, base + q.offset);
  // The activation rows each task's kernel reads: quantized here, handed over by the op that wrote x
  // (quantized_input), or none (null: the kernel quantizes x itself).
  auto& act_rows_of = matmul_many_host_.act_rows;
  act_rows_of.resize(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i)
    act_rows_of[i] = offset_of[i] != kQuantizedInKernel ? base + offset_of[i]
                     : tasks[i].w.n_out > 0 ? quantized_input(BA::raw(tasks[i].x), rows, tasks[i].w.n_in)
                                            : nullptr;
  for (size_t i = 0; i < tasks.size();) {
    const Weight& w = tasks[i].w;
    if (w.n_out <= 0) {
      ++i;
      continue;
    }
    const GgmlType act = quant::vec_dot_type(w.type);
    const float* x = BA::raw(tasks[i].x);
    const uint8_t* act_rows = act_rows_of[i];
    const bool in_kernel = !act_rows;
    // The products after it of the same type, row length and activation rows join its launch.
    cuda::MatmulGroup group{};
    size_t next = i;
    if (cuda::decode_matvec(w.type, rows)) {
      for (; next < tasks.size() && group.n < cuda::kMatmulGroupMax; ++next) {
        const Weight& v = tasks[next].w;
        if (v.n_out <= 0 || v.type != w.type || v.n_in != w.n_in || BA::raw(tasks[next].x) != x ||
            act_rows_of[next] != act_rows)
          break;
        group.part[group.n++] = {static_cast<const uint8_t*>(v.data), v.row_bytes(), v.n_out,
                                 BA::raw(tasks[next].y)};
      }
    }
    if (group.n > 1) {
      cuda::launch_matmul_group(w.type, group, w.n_in, act_rows, cuda::act_row_stride(act, w.n_in), rows,
                                in_kernel ? x : nullptr, as_stream(stream_));
      ++matmul_groups_launched_;
      i = next;
      continue;
    }
    cuda::launch_matmul(w.type, static_cast<const uint8_t*>(w.data), w.row_bytes(), w.n_out, w.n_in, act_rows,
                        cuda::act_row_stride(act, w.n_in), rows, BA::raw(tasks[i].y), w.n_out,
                        in_kernel ? x : nullptr, as_stream(stream_));
    ++i;
  }
}

void CudaBackend::norm_matmul_many(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight,
                                   float eps, Buf<float> xn, std::span<const MatmulTask> tasks) {
  check_norm_matmul_tasks(xn, n, tasks);
  // Decode rows whose products would each quantize the normed rows in every block: the norm quantizes them
  // once and hands them to matmul_many's products (quantized_output). The same bits either way. (The
  // one-launch kernel, the products' blocks norming and quantizing their own input rows, gave their bits on
  // the H200 but decoded slower; its mend waits on a branch: docs/ARCHITECTURE.md.)
  const bool prequantize = !tasks.empty() && tasks.size() <= max_matmul_tasks() &&
                           cuda::rms_norm_q8_shape(n) &&
                           std::all_of(tasks.begin(), tasks.end(), [&](const MatmulTask& t) {
                             return cuda::in_kernel_quantize(t.w.type, BA::raw(xn), n, n, rows);
                           });
  normed_rows(x, rows, n, weight, eps, xn, prequantize);
  matmul_many(tasks, rows);
}

struct CudaBackend::FfnHost {
  std::vector<FfnTask> above, upto;  // a mixed call's tasks of more than kMatvecMaxRows rows, and the rest
  std::vector<cuda::FfnDesc> descs;
  std::vector<cuda::FfnItem> items;
  std::vector<int32_t> entry_task;
  std::vector<uint8_t> table;
};

void CudaBackend::FfnHostDeleter::operator()(FfnHost* p) const { delete p; }

void CudaBackend::ffn(std::span<const FfnTask> ffns, const ActivationParams& act, Buf<const float> x,
                      int64_t x_rows, Buf<float> out) {
  const auto timer = timed({"ffn", ggml_type_name(ffns.empty() ? GgmlType::F32 : ffns[0].gate.type).data(),
                            ffns.empty() ? 0 : ffns[0].gate.n_out, ffns.empty() ? 0 : ffns[0].gate.n_in,
                            static_cast<int64_t>(ffns.size())});
  if (ffns.empty()) return;
  // Each task's rows go to the kernels its own row count picks (tensor cores above kMatvecMaxRows rows, the
  // matrix-vector kernels up to it), not one choice for the whole call: a task's results are then the same
  // bits whatever other tasks share the call (a tier's waves, each device's part of an expert split).
  if (!ffn_host_) ffn_host_.reset(new FfnHost);
  const auto is_above = [](const FfnTask& t) { return t.n_rows > cuda::kMatvecMaxRows; };
  if (std::all_of(ffns.begin(), ffns.end(), is_above) || std::none_of(ffns.begin(), ffns.end(), is_above)) {
    ffn_group(ffns, act, x, x_rows, out);
    return;
  }
  auto& above = ffn_host_->above;
  auto& upto = ffn_host_->upto;
  above.clear();
  upto.clear();
  for (const FfnTask& t : ffns) (is_above(t) ? above : upto).push_back(t);
  // The two groups go one after the other (the tables below are reused): copies, as the lists are refilled.
  ffn_group(std::span<const FfnTask>(above), act, x, x_rows, out);
  ffn_group(std::span<const FfnTask>(upto), act, x, x_rows, out);
}

void CudaBackend::ffn_group(std::span<const FfnTask> ffns, const ActivationParams& act, Buf<const float> x,
                            int64_t x_rows, Buf<float> out) {
  const FfnTask& a = ffns[0];
  check_weight(a.gate, "ffn gate");
  check_weight(a.up, "ffn up");
  check_weight(a.down, "ffn down");
  const int64_t n_in = a.gate.n_in, n_ff = a.gate.n_out, n_out = a.down.n_out;
  need(x, x_rows * n_in, "ffn input");
  const int64_t out_rows_total = n_out > 0 ? static_cast<int64_t>(out.size()) / n_out : 0;

  // The host tables are members, cleared and refilled: a warm decode loop allocates nothing.
  auto& descs = ffn_host_->descs;
  auto& items = ffn_host_->items;
  auto& entry_task = ffn_host_->entry_task;
  descs.resize(ffns.size());
  items.clear();
  entry_task.clear();
  int max_cols = 1;
  // Tasks of more than 8 rows (prefill) go to the tensor-core kernels in items of up to kFfnMmaCols rows when
  // every stage has an mma kernel for its weights.
  int64_t most_rows = 0;
  for (const FfnTask& b : ffns) most_rows = std::max(most_rows, b.n_rows);
  const bool mma = most_rows > cuda::kMatvecMaxRows && a.gate.type == a.up.type &&
                   cuda::mma_supported(a.gate.type) && cuda::mma_supported(a.down.type);
  const int64_t item_rows = mma ? cuda::kFfnMmaCols : 8;
  for (size_t f = 0; f < ffns.size(); ++f) {
    const FfnTask& b = ffns[f];
    const bool same = b.gate.type == a.gate.type && b.up.type == a.up.type && b.down.type == a.down.type &&
                      b.gate.packing == a.gate.packing && b.up.packing == a.up.packing &&
                      b.down.packing == a.down.packing && b.gate.n_in == n_in && b.gate.n_out == n_ff &&
                      b.up.n_in == n_in && b.up.n_out == n_ff && b.down.n_in == n_ff && b.down.n_out == n_out;
    if (!same)
      fail(
          "ffn: FFN {} (gate {} {}x{}, up {} {}x{}, down {} {}x{}) does not match the shapes and types of "
          "FFN 0 "
          "(gate {} {}x{}, down {} {}x{})",
          f, ggml_type_name(b.gate.type), b.gate.n_out, b.gate.n_in, ggml_type_name(b.up.type), b.up.n_out,
          b.up.n_in, ggml_type_name(b.down.type), b.down.n_out, b.down.n_in, ggml_type_name(a.gate.type),
          n_ff, n_in, ggml_type_name(a.down.type), n_out, n_ff);
    if (b.n_rows < 0) fail("ffn: FFN {} has {} rows", f, b.n_rows);
    if (b.in_rows) need(b.in_rows, b.n_rows, "ffn in_rows");
    if (b.out_rows) need(b.out_rows, b.n_rows, "ffn out_rows");
    if (b.gate_bias) need(b.gate_bias, n_ff, "ffn gate bias");
    if (b.up_bias) need(b.up_bias, n_ff, "ffn up bias");
    if (b.down_bias) need(b.down_bias, n_out, "ffn down bias");
    if (!b.out_rows && b.n_rows > out_rows_total)
      fail("ffn: FFN {} writes {} rows into an output of {}", f, b.n_rows, out_rows_total);
    cuda::FfnDesc& d = descs[f];
    d.gate = static_cast<const uint8_t*>(b.gate.data);
    d.up = static_cast<const uint8_t*>(b.up.data);
    d.down = static_cast<const uint8_t*>(b.down.data);
    d.gate_bias = b.gate_bias ? BA::raw(b.gate_bias) : nullptr;
    d.up_bias = b.up_bias ? BA::raw(b.up_bias) : nullptr;
    d.down_bias = b.down_bias ? BA::raw(b.down_bias) : nullptr;
    d.in_rows = b.in_rows ? BA::raw(b.in_rows) : nullptr;
    d.out_rows = b.out_rows ? BA::raw(b.out_rows) : nullptr;
    d.out_scale = b.out_scale;
    d.entry0 = static_cast<int32_t>(entry_task.size());
    d.n_rows = static_cast<int32_t>(b.n_rows);
    for (int64_t i = 0; i < b.n_rows; i += item_rows) {
      const int cols = static_cast<int>(std::min<int64_t>(item_rows, b.n_rows - i));
      items.push_back({static_cast<int32_t>(f), static_cast<int32_t>(i), cols});
      max_cols = std::max(max_cols, cols);
    }
    entry_task.insert(entry_task.end(), static_cast<size_t>(b.n_rows), static_cast<int32_t>(f));
  }
  const int64_t entries = static_cast<int64_t>(entry_task.size());
  if (entries == 0 || n_out <= 0) return;
  if (items.size() > 65535) fail("cuda backend: ffn of {} row groups (at most 65535 per call)", items.size());

  if (skip_op("ffn", BA::raw(out), entries, static_cast<int64_t>(ffns.size()))) return;
  // The task tables, one staged copy: descs | items | entry_task, then the device-only row map.
  const size_t descs_bytes = descs.size() * sizeof(cuda::FfnDesc);
  const size_t items_off = (descs_bytes + 15) / 16 * 16;
  const size_t items_bytes = items.size() * sizeof(cuda::FfnItem);
  const size_t task_off = (items_off + items_bytes + 15) / 16 * 16;
  const size_t table_bytes = task_off + static_cast<size_t>(entries) * sizeof(int32_t);
  const size_t map_off = (table_bytes + 15) / 16 * 16;
  auto& host = ffn_host_->table;
  host.resize(table_bytes);
  std::memcpy(host.data(), descs.data(), descs_bytes);
  std::memcpy(host.data() + items_off, items.data(), items_bytes);
  std::memcpy(host.data() + task_off, entry_task.data(), static_cast<size_t>(entries) * sizeof(int32_t));
  auto* table = static_cast<uint8_t*>(
      grow(desc_scratch_, map_off + static_cast<size_t>(entries) * sizeof(int32_t), "ffn task tables"));

  stage_to_device(table, host.data(), table_bytes);
  ffn_launches(a, act, x, x_rows, out, out_rows_total, table, items_off, task_off, map_off, entries,
               static_cast<int64_t>(items.size()), max_cols, false);
}

namespace {
cuda::FfnShape ffn_shape(const FfnTask& a, const ActivationParams& act, int max_cols) {
  cuda::FfnShape shape{};
  shape.gate_type = a.gate.type;
  shape.up_type = a.up.type;
  shape.down_type = a.down.type;
  shape.n_in = a.gate.n_in;
  shape.n_ff = a.gate.n_out;
  shape.n_out = a.down.n_out;
  shape.gate_row_bytes = a.gate.row_bytes();
  shape.up_row_bytes = a.up.row_bytes();
  shape.down_row_bytes = a.down.row_bytes();
  shape.act = act.kind == Activation::SwiGLU  ? cuda::FfnAct::SwiGLU
              : act.kind == Activation::GeGLU ? cuda::FfnAct::GeGLU
                                              : cuda::FfnAct::OaiSwiGLU;
  shape.alpha = act.alpha;
  shape.limit = act.limit;
  shape.max_cols = max_cols;
  return shape;
}

// routed_ffn's checks, and the experts' stacks and shape for the routed kernels.
struct RoutedCall {
  FfnTask a;
  cuda::ExpertStacks st{};
  int64_t n_ff = 0, n_out = 0;
};
RoutedCall routed_call(const RoutedExperts& ex, Buf<const int32_t> ids, int64_t entries, int64_t T,
                       Buf<const float> x, Buf<float> out) {
  RoutedCall c;
  FfnTask& a = c.a;
  cuda::ExpertStacks& st = c.st;
  a.gate = ex.gate.first;
  a.up = ex.up.first;
  a.down = ex.down.first;
  check_weight(a.gate, "routed_ffn gate");
  check_weight(a.up, "routed_ffn up");
  check_weight(a.down, "routed_ffn down");
  const int64_t n_in = a.gate.n_in, n_ff = a.gate.n_out, n_out = a.down.n_out;
  c.n_ff = n_ff;
  c.n_out = n_out;
  if (a.up.n_in != n_in || a.up.n_out != n_ff || a.down.n_in != n_ff)
    fail("routed_ffn: gate {}x{}, up {}x{}, down {}x{} do not make one FFN", n_ff, n_in, a.up.n_out,
         a.up.n_in, n_out, a.down.n_in);
  need(ids, entries, "routed_ffn ids");
  need(x, T * n_in, "routed_ffn input");
  need(out, entries * n_out, "routed_ffn output");
  if (ex.gate_bias) need(ex.gate_bias, ex.n_expert * n_ff, "routed_ffn gate biases");
  if (ex.up_bias) need(ex.up_bias, ex.n_expert * n_ff, "routed_ffn up biases");
  if (ex.down_bias) need(ex.down_bias, ex.n_expert * n_out, "routed_ffn down biases");
  if (ex.down_scale) need(ex.down_scale, ex.n_expert, "routed_ffn expert output scales");
  if (ex.slot_of) need(ex.slot_of, ex.n_expert, "routed_ffn expert slot map");
  for (const auto* stack : {&ex.gate, &ex.up, &ex.down})
    if (needs_even_address(stack->first.type) && stack->stride % 2 != 0)
      fail("routed_ffn: {} experts {} bytes apart (an even stride is needed)",
           ggml_type_name(stack->first.type), stack->stride);
  st.gate = static_cast<const uint8_t*>(ex.gate.first.data);
  st.up = static_cast<const uint8_t*>(ex.up.first.data);
  st.down = static_cast<const uint8_t*>(ex.down.first.data);
  st.gate_stride = ex.gate.stride;
  st.up_stride = ex.up.stride;
  st.down_stride = ex.down.stride;
  st.gate_bias = ex.gate_bias ? BA::raw(ex.gate_bias) : nullptr;
  st.up_bias = ex.up_bias ? BA::raw(ex.up_bias) : nullptr;
  st.down_bias = ex.down_bias ? BA::raw(ex.down_bias) : nullptr;
  st.down_scale = ex.down_scale ? BA::raw(ex.down_scale) : nullptr;
  st.slot_of = ex.slot_of ? BA::raw(ex.slot_of) : nullptr;
  st.n_expert = ex.n_expert;
  st.n_ff = n_ff;
  st.n_out = n_out;
  return c;
}
}  // namespace

// The four launches of a grouped FFN over device task tables (descs | items | entry_task | row map at the
// given offsets of `table`), whoever built them: ffn() stages them from the host, routed_ffn() builds them
// on the device (with the row map: row_map_ready).
void CudaBackend::ffn_launches(const FfnTask& a, const ActivationParams& act, Buf<const float> x,
                               int64_t x_rows, Buf<float> out, int64_t out_rows_total, uint8_t* table,
                               size_t items_off, size_t task_off, size_t map_off, int64_t entries,
                               int64_t n_items, int max_cols, bool row_map_ready) {
  const int64_t n_in = a.gate.n_in, n_ff = a.gate.n_out;
  const GgmlType act_g = quant::vec_dot_type(a.gate.type), act_u = quant::vec_dot_type(a.up.type),
                 act_h = quant::vec_dot_type(a.down.type);
  const bool shared_input = act_g == act_u;
  const size_t sg = cuda::act_row_stride(act_g, n_in), su = cuda::act_row_stride(act_u, n_in),
               sh = cuda::act_row_stride(act_h, n_ff);
  const size_t E = static_cast<size_t>(entries);
  const size_t qg_bytes = sg * E, qu_bytes = shared_input ? 0 : su * E;
  const size_t h_bytes = E * static_cast<size_t>(n_ff) * sizeof(float);
  const size_t u_bytes = a.gate.type == a.up.type ? 0 : h_bytes;
  const size_t total = qg_bytes + qu_bytes + h_bytes + u_bytes + sh * E;
  auto* base = static_cast<uint8_t*>(grow(ffn_scratch_, total, "ffn scratch"));
  uint8_t* qg = base;
  uint8_t* qu = shared_input ? qg : qg + qg_bytes;
  auto* h = reinterpret_cast<float*>(base + qg_bytes + qu_bytes);
  auto* u_scratch = u_bytes ? reinterpret_cast<float*>(base + qg_bytes + qu_bytes + h_bytes) : nullptr;
  uint8_t* qh = base + qg_bytes + qu_bytes + h_bytes + u_bytes;

  const auto* d_descs = reinterpret_cast<const cuda::FfnDesc*>(table);
  const auto* d_items = reinterpret_cast<const cuda::FfnItem*>(table + items_off);
  const auto* d_task = reinterpret_cast<const int32_t*>(table + task_off);
  auto* d_map = reinterpret_cast<int32_t*>(table + map_off);
  auto* err = static_cast<cuda::DeviceError*>(error_word_device_);
  const cudaStream_t s = as_stream(stream_);

  // Decode-sized items of Q8_0-activation weights quantize their input (and the down stage its h) inside
  // the kernels: two launches fewer.
  const bool quantize_x =
      a.gate.type == a.up.type && cuda::in_kernel_quantize(a.gate.type, BA::raw(x), n_in, n_in, max_cols);
  const bool quantize_h = cuda::in_kernel_quantize(a.down.type, h, n_ff, n_ff, max_cols);
  if (quantize_x) {
    if (!row_map_ready) cuda::launch_ffn_row_map(x_rows, d_task, d_descs, entries, d_map, err, s);
  } else if (row_map_ready) {
    cuda::launch_quantize(act_g, BA::raw(x), n_in, d_map, entries, n_in, qg, s);
  } else {
    cuda::launch_ffn_gather_quantize(act_g, BA::raw(x), x_rows, n_in, d_task, d_descs, entries, d_map, qg,
                                     err, s);
  }
  if (!shared_input) cuda::launch_quantize(act_u, BA::raw(x), n_in, d_map, entries, n_in, qu, s);
  const cuda::FfnShape shape = ffn_shape(a, act, max_cols);
  cuda::launch_ffn_gate_up(shape, d_descs, d_items, n_items, qg, sg, qu, su, h, u_scratch, entries,
                           quantize_x ? BA::raw(x) : nullptr, d_map, s);
  if (!quantize_h) cuda::launch_quantize(act_h, h, n_ff, nullptr, entries, n_ff, qh, s);
  cuda::launch_ffn_down(shape, d_descs, d_items, n_items, qh, sh, BA::raw(out), out_rows_total, err,
                        quantize_h ? h : nullptr, s);
}

void CudaBackend::routed_ffn(const RoutedExperts& ex, const ActivationParams& act, Buf<const int32_t> ids,
                             int64_t T, int k, Buf<const float> x, Buf<float> out) {
  const auto timer = timed(
      {"routed_ffn", ggml_type_name(ex.gate.first.type).data(), ex.gate.first.n_out, ex.gate.first.n_in, T});
  const int64_t entries = T * k;
  if (entries <= 0) return;
  const RoutedCall c = routed_call(ex, ids, entries, T, x, out);
  if (skip_op("routed_ffn", BA::raw(out), entries, c.n_out)) return;
  const FfnTask& a = c.a;
  const cuda::ExpertStacks& st = c.st;
  const int64_t n_ff = c.n_ff;
  const size_t E = static_cast<size_t>(entries);
  auto* err = static_cast<cuda::DeviceError*>(error_word_device_);
  const cuda::FfnShape shape = ffn_shape(a, act, 1);
  // Decode of the common types: no tables; the FFN kernels read the experts from the ids.
  if (cuda::routed_ffn_direct(shape, BA::raw(x))) {
    // h: the scratch's start, which the device allocator aligns to 256 bytes.
    auto* h =
        static_cast<float*>(grow(ffn_scratch_, E * static_cast<size_t>(n_ff) * sizeof(float), "ffn scratch"));
    cuda::launch_routed_ffn(shape, cuda::RoutedSource{st, BA::raw(ids), k, err}, entries, BA::raw(x), h,
                            BA::raw(out), as_stream(stream_));
    return;
  }
  // Tables: descs | items | entry_task | row map, then the (in, out) row pairs the descs point into.
  const size_t items_off = (E * sizeof(cuda::FfnDesc) + 15) / 16 * 16;
  const size_t task_off = (items_off + E * sizeof(cuda::FfnItem) + 15) / 16 * 16;
  const size_t map_off = (task_off + E * sizeof(int32_t) + 15) / 16 * 16;
  const size_t rows_off = (map_off + E * sizeof(int32_t) + 15) / 16 * 16;
  auto* table =
      static_cast<uint8_t*>(grow(routed_scratch_, rows_off + 2 * E * sizeof(int32_t), "routed ffn tables"));
  cuda::launch_routed_tables(st, BA::raw(ids), entries, k, reinterpret_cast<cuda::FfnDesc*>(table),
                             reinterpret_cast<cuda::FfnItem*>(table + items_off),
                             reinterpret_cast<int32_t*>(table + task_off),
                             reinterpret_cast<int32_t*>(table + map_off),
                             reinterpret_cast<int32_t*>(table + rows_off), err, as_stream(stream_));
  ffn_launches(a, act, x, T, out, entries, table, items_off, task_off, map_off, entries, entries, 1, true);
}

void CudaBackend::routed_ffn_add(const RoutedExperts& ex, const ActivationParams& act, Buf<const int32_t> ids,
                                 Buf<const float> weights, int64_t T, int k, Buf<const float> x,
                                 Buf<float> out, Buf<float> acc) {
  const int64_t entries = T * k;
  if (entries <= 0) return;
  const RoutedCall c = routed_call(ex, ids, entries, T, x, out);
  need(weights, entries, "routed_ffn_add weights");
  need(acc, T * c.n_out, "routed_ffn_add sums");
  const cuda::FfnShape shape = ffn_shape(c.a, act, 1);
  if (!ex.host.empty()) {
    if (!ex.slot_of || !cuda::routed_ffn_combines(shape, BA::raw(x), k) ||
        !computes_host_experts(act, ex.host[0].gate, ex.host[0].up, ex.host[0].down, k,
                               ex.gate_bias || ex.up_bias))
      fail("routed_ffn_add: experts in host memory for a call the host cannot compute to the GPU's bits");
    routed_ffn_add_host(ex, act, &c, ids, weights, T, k, x, acc);
    return;
  }
  if (!cuda::routed_ffn_combines(shape, BA::raw(x), k)) {
    routed_ffn(ex, act, ids, T, k, x, out);
    moe_combine_add(out, weights, T, k, c.n_out, acc);
    return;
  }
  const auto timer = timed({"routed_ffn_add", ggml_type_name(ex.gate.first.type).data(), ex.gate.first.n_out,
                            ex.gate.first.n_in, T});
  if (skip_op("routed_ffn_add", BA::raw(acc), entries, c.n_out)) return;
  // qh: the scratch's start, which the device allocator aligns to 256 bytes.
  auto* qh = static_cast<uint8_t*>(
      grow(ffn_scratch_, static_cast<size_t>(entries) * cuda::act_row_stride(GgmlType::Q8_0, c.n_ff),
           "ffn scratch"));
  auto* err = static_cast<cuda::DeviceError*>(error_word_device_);
  cuda::launch_routed_ffn_combine(shape, cuda::RoutedSource{c.st, BA::raw(ids), k, err}, T, BA::raw(x),
                                  quantized_input(BA::raw(x), T, c.a.gate.n_in), qh, BA::raw(weights),
                                  BA::raw(acc), as_stream(stream_));
}

bool CudaBackend::computes_host_experts(const ActivationParams& act, const Weight& gate, const Weight& up,
                                        const Weight& down, int k, bool gate_up_biases) const {
  if (act.kind != Activation::SwiGLU || gate_up_biases || gate.type != up.type) return false;
  if (k != 2 && k != 4 && k != 6 && k != 8) return false;  // the combine kernel's k (routed_ffn_combines)
  for (const Weight* w : {&gate, &up, &down})
    if (!cuda_host::warp_order_supported(w->type, w->packing)) return false;
  return true;
}

// The host's experts of a routed_ffn_add: the input rows and ids come down (one small copy, waited for), the
// GPU's gate/up launch for its own entries goes first, the host computes its entries meanwhile, their down
// sums go up, and the combine kernel takes them in the entries' places. The pinned bytes are reused by the
// next call only after its own download, which the stream orders after this call's upload.
void CudaBackend::routed_ffn_add_host(const RoutedExperts& ex, const ActivationParams& act, const void* call,
                                      Buf<const int32_t> ids, Buf<const float> weights, int64_t T, int k,
                                      Buf<const float> x, Buf<float> acc) {
  const RoutedCall& c = *static_cast<const RoutedCall*>(call);
  note_op();
  graph_.unreplayable("routed experts computed on the host");
  const auto timer = timed(
      {"routed_ffn_add_host", ggml_type_name(ex.gate.first.type).data(), c.n_ff, ex.gate.first.n_in, T});
  const int64_t entries = T * k, n_in = c.a.gate.n_in;
  const size_t x_bytes = static_cast<size_t>(T * n_in) * sizeof(float);
  const size_t ids_bytes = static_cast<size_t>(entries) * sizeof(int32_t);
  const size_t v_bytes = static_cast<size_t>(entries * c.n_out) * sizeof(float);
  const size_t ids_at = (x_bytes + 63) / 64 * 64, v_at = (ids_at + ids_bytes + 63) / 64 * 64;
  const size_t io_bytes = v_at + v_bytes;
  cudaStream_t stream = as_stream(stream_);
  if (host_io_bytes_ < io_bytes) {
    cuda::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (host_io_) cuda::check_cuda(cudaFreeHost(host_io_), "cudaFreeHost");
    host_io_ = nullptr;
    host_io_bytes_ = 0;
    // Mapped: the down sums go up through the SMs' reads (launch_copy_floats), not a copy engine, where
    // they would queue behind the records being copied up for the next layers.
    cuda::check_cuda(cudaHostAlloc(&host_io_, io_bytes, cudaHostAllocMapped), "cudaHostAlloc (host experts)");
    host_io_bytes_ = io_bytes;
  }
  if (!host_in_event_) {
    cudaEvent_t e = nullptr;
    cuda::check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    host_in_event_ = e;
  }
  if (!host_runner_) host_runner_ = std::make_unique<cuda_host::HostExpertRunner>(host_threads_);
  auto* io = static_cast<uint8_t*>(host_io_);
  auto* hx = reinterpret_cast<float*>(io);
  auto* hids = reinterpret_cast<int32_t*>(io + ids_at);
  auto* hv = reinterpret_cast<float*>(io + v_at);
  cuda::check_cuda(cudaMemcpyAsync(hx, BA::raw(x), x_bytes, cudaMemcpyDeviceToHost, stream),
                   "cudaMemcpyAsync (down)");
  cuda::check_cuda(cudaMemcpyAsync(hids, BA::raw(ids), ids_bytes, cudaMemcpyDeviceToHost, stream),
                   "cudaMemcpyAsync (down)");
  cuda::check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(host_in_event_), stream), "cudaEventRecord");
  auto* qh = static_cast<uint8_t*>(
      grow(ffn_scratch_, static_cast<size_t>(entries) * cuda::act_row_stride(GgmlType::Q8_0, c.n_ff),
           "ffn scratch"));
  auto* v_dev = static_cast<float*>(grow(host_v_scratch_, v_bytes, "host expert sums"));
  const cuda::FfnShape shape = ffn_shape(c.a, act, 1);
  const cuda::RoutedSource rs{c.st, BA::raw(ids), k, static_cast<cuda::DeviceError*>(error_word_device_)};
  cuda::launch_routed_gate_up_q8(shape, rs, entries, BA::raw(x), quantized_input(BA::raw(x), T, n_in), qh,
                                 stream);
  cuda::check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(host_in_event_)), "cudaEventSynchronize");
  host_jobs_.clear();
  for (int64_t i = 0; i < entries; ++i) {
    const int32_t e = hids[i];
    for (const HostExpert& he : ex.host)
      if (he.expert == e) {
        host_jobs_.push_back({he.gate, he.up, he.down, hx + (i / k) * n_in, hv + i * c.n_out});
        break;
      }
  }
  host_runner_->run(host_jobs_);
  void* hv_mapped = nullptr;
  cuda::check_cuda(cudaHostGetDevicePointer(&hv_mapped, hv, 0), "cudaHostGetDevicePointer");
  cuda::launch_copy_floats(v_dev, static_cast<const float*>(hv_mapped), entries * c.n_out, stream);
  cuda::launch_routed_down_combine(shape, rs, T, qh, BA::raw(weights), BA::raw(acc), v_dev, stream);
}

}  // namespace df::backend

// Gated FFNs (MoE experts, dense FFNs) as three pool jobs for the whole group:
//   1. each (FFN, row) input quantized to the gate/up activation format, gathered per FFN;
//   2. tasks (FFN, block of n_ff rows, token tile): gate and up tiles, their biases, the activation, and the
//      quantization of those n_ff values of each token's down input — the row blocks are whole activation
//      blocks (32 values for Q8_0, 256 for Q8_K), so quantizing a segment writes exactly the bytes that
//      quantizing the whole row would, and the activation never makes a trip through memory in float;
//   3. tasks (FFN, block of output rows, token tile): down, its bias and scale, scattered to the output rows.
// Each element goes through the same float operations, in the same order, as matmul + add_bias_rows + the
// activation + matmul + add_bias_rows would apply to it, so the result is theirs bit for bit.
// A decode step's k experts thus keep every thread busy with two waits in all, however small each expert.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tiling.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::backend {
namespace {

using detail::Tiling;

// A down task whose FFN's gate/up tasks are still running spins this many times, then yields its core (the
// task it waits for may belong to a thread that is not running).
constexpr int kSpinsBeforeYield = 1 << 12;

// Index of the group [offsets[i], offsets[i + 1]) holding `at` (offsets ascending, n + 1 of them).
size_t group_of(const int64_t* offsets, size_t n, int64_t at) {
  return static_cast<size_t>(std::upper_bound(offsets, offsets + n + 1, at) - offsets) - 1;
}

// ggml's CPU GeGLU (ggml_geglu_split, which build_ffn and build_moe_ffn use for LLM_FFN_GELU + a gate):
// ggml_vec_geglu_f32 (ggml-cpu vec.h, GGML_GELU_FP16 defined) gives 0 for g <= -10, g · u for g >= 10, else
// ggml_table_gelu_f16[f16(g)] · u. The table (ggml_cpu_init) holds f16(ggml_gelu_f32(h)) for every f16 h,
// ggml_gelu_f32(h) = 0.5f*h*(1.0f + tanhf(SQRT_2_OVER_PI*h*(1.0f + GELU_COEF_A*h*h))) — compiled as C with
// GCC's default -ffp-contract=fast, so the x86 builds with FMA (haswell and later, zen4: the golden
// reference) evaluate 1.0f + (A·h)·h as fma(A·h, h, 1.0f). Checked against llama.cpp v0.4.0's prebuilt
// libggml-cpu-{zen4,haswell,sapphirerapids}.so on every f16 value: this formula gives their table bit for
// bit; the non-FMA builds (x64, sse42) differ in one entry (h = -1.9990234375: 0xA9D2 where FMA gives
// 0xA9D3).
float gelu_f16_table(float g) {
  const float h = quant::fp16_to_fp32(quant::fp32_to_fp16(g));
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoefA = 0.044715f;
  const float t = std::tanh(kSqrt2OverPi * h * std::fma(kCoefA * h, h, 1.0f));
  return quant::fp16_to_fp32(quant::fp32_to_fp16(0.5f * h * (1.0f + t)));
}
float geglu_ggml(float g, float u) {
  if (g <= -10.0f) return 0.0f;
  if (g >= 10.0f) return g * u;
  return gelu_f16_table(g) * u;
}

float oai_swiglu(float g, float u, float alpha, float limit) {
  const float x = std::min(g, limit);
  const float y = std::max(std::min(u, limit), -limit);
  return x / (1.0f + std::exp(alpha * -x)) * (y + 1.0f);
}

void check_shapes(std::span<const FfnTask> ffns, int64_t x_rows) {
  const FfnTask& a = ffns[0];
  for (size_t f = 0; f < ffns.size(); ++f) {
    const FfnTask& b = ffns[f];
    const bool same = b.gate.type == a.gate.type && b.up.type == a.up.type && b.down.type == a.down.type &&
                      b.gate.packing == a.gate.packing && b.up.packing == a.up.packing &&
                      b.down.packing == a.down.packing && b.gate.n_in == a.gate.n_in &&
                      b.gate.n_out == a.gate.n_out && b.up.n_in == a.gate.n_in &&
                      b.up.n_out == a.gate.n_out && b.down.n_in == a.gate.n_out &&
                      b.down.n_out == a.down.n_out;
    if (!same)
      fail(
          "ffn: FFN {} (gate {} {}x{}, up {} {}x{}, down {} {}x{}) does not match the shapes and "
          "types "
          "of FFN 0 (gate {} {}x{}, down {} {}x{})",
          f, ggml_type_name(b.gate.type), b.gate.n_out, b.gate.n_in, ggml_type_name(b.up.type), b.up.n_out,
          b.up.n_in, ggml_type_name(b.down.type), b.down.n_out, b.down.n_in, ggml_type_name(a.gate.type),
          a.gate.n_out, a.gate.n_in, ggml_type_name(a.down.type), a.down.n_out, a.down.n_in);
    if (b.n_rows < 0) fail("ffn: FFN {} has {} rows", f, b.n_rows);
    const int32_t* in_rows =
        b.in_rows ? detail::raw(b.in_rows.first(static_cast<size_t>(b.n_rows))) : nullptr;
    if (b.out_rows) b.out_rows.first(static_cast<size_t>(b.n_rows));
    for (const auto& bias : {b.gate_bias, b.up_bias})
      if (bias) bias.first(static_cast<size_t>(a.gate.n_out));
    if (b.down_bias) b.down_bias.first(static_cast<size_t>(a.down.n_out));
    for (int64_t i = 0; i < b.n_rows; ++i) {
      const int64_t r = in_rows ? in_rows[i] : i;
      if (r < 0 || r >= x_rows) fail("ffn: FFN {} reads input row {} of {}", f, r, x_rows);
    }
  }
}

}  // namespace

void CpuBackend::ffn(std::span<const FfnTask> ffns, const ActivationParams& act, Buf<const float> x_buf,
                     int64_t x_rows, Buf<float> out_buf) {
  const auto timer =
      timed({"ffn", ffns.empty() ? nullptr : ggml_type_name(ffns[0].gate.type).data(),
             ffns.empty() ? 0 : ffns[0].gate.n_out, ffns.empty() ? 0 : ffns[0].gate.n_in, x_rows});
  if (ffns.empty()) return;
  check_shapes(ffns, x_rows);
  const FfnTask& first = ffns[0];
  const int64_t n_in = first.gate.n_in, n_ff = first.gate.n_out, n_out = first.down.n_out;
  const float* x = detail::raw(x_buf.first(static_cast<size_t>(x_rows * n_in)));
  float* out = detail::raw(out_buf);
  const size_t out_rows_held = out_buf.size() / static_cast<size_t>(n_out);
  detail::check_weight(first.gate);
  detail::check_weight(first.up);
  detail::check_weight(first.down);
  const kernels::VecDotKernels& kg = kernels::vec_dot_kernels(first.gate.type, level_);
  const kernels::VecDotKernels& ku = kernels::vec_dot_kernels(first.up.type, level_);
  const kernels::VecDotKernels& kd = kernels::vec_dot_kernels(first.down.type, level_);
  const kernels::GemmFn gate_gemm = detail::gemm_of(kg, first.gate), up_gemm = detail::gemm_of(ku, first.up),
                        down_gemm = detail::gemm_of(kd, first.down);
  const kernels::QuantizeFn quantize_g = kernels::activation_quantizer(kg.activation, level_);
  const kernels::QuantizeFn quantize_u = kernels::activation_quantizer(ku.activation, level_);
  const kernels::QuantizeFn quantize_h = kernels::activation_quantizer(kd.activation, level_);
  const bool shared_input = ku.activation == kg.activation;
  const size_t qg_row = ggml_row_bytes(kg.activation, n_in);
  const size_t qu_row = shared_input ? 0 : ggml_row_bytes(ku.activation, n_in);
  const size_t qh_row = ggml_row_bytes(kd.activation, n_ff);
  const GgmlTypeTraits& h_format = ggml_traits(kd.activation);
  const int64_t h_block = std::max<int64_t>(4, h_format.block_size);  // a whole activation block, and of 4

  // Offsets per FFN: its first entry (gathered input row), first task of job 2, first task of job 3.
  const size_t n = ffns.size();
  task_offsets_.resize(3 * (n + 1));
  int64_t* entry_at = task_offsets_.data();
  int64_t* gate_up_at = entry_at + (n + 1);
  int64_t* down_at = gate_up_at + (n + 1);
  entry_at[0] = 0;
  for (size_t f = 0; f < n; ++f) entry_at[f + 1] = entry_at[f] + ffns[f].n_rows;
  const int64_t entries = entry_at[n];
  if (entries == 0) return;

  const int threads = pool_.size();
  const auto n_ffns = static_cast<int64_t>(ffns.size());
  const int64_t gate_up_target =
      detail::task_macs(entries * n_ff * 2 * n_in, pool_,
                        n_ffns * n_ff * static_cast<int64_t>(first.gate.row_bytes() + first.up.row_bytes()));
  const int64_t down_target = detail::task_macs(
      entries * n_out * n_ff, pool_, n_ffns * n_out * static_cast<int64_t>(first.down.row_bytes()));
  const auto gate_up_tiling = [&](size_t f) {
    return detail::tile_product(
        n_ff, ffns[f].n_rows, 2 * n_in, first.gate.row_bytes() + first.up.row_bytes(), gate_up_target,
        std::max({h_block, detail::row_align(first.gate), detail::row_align(first.up)}), f + 1 == n);
  };
  const auto down_tiling = [&](size_t f) {
    return detail::tile_product(n_out, ffns[f].n_rows, n_ff, first.down.row_bytes(), down_target,
                                detail::row_align(first.down), f + 1 == n);
  };
  gate_up_at[0] = down_at[0] = 0;
  size_t per_thread = 0;
  for (size_t f = 0; f < n; ++f) {
    const Tiling gu = gate_up_tiling(f), d = down_tiling(f);
    gate_up_at[f + 1] = gate_up_at[f] + gu.tasks();
    down_at[f + 1] = down_at[f] + d.tasks();
    per_thread = std::max({per_thread, static_cast<size_t>(2 * gu.token_tile * gu.row_block),
                           static_cast<size_t>(d.token_tile * d.row_block)});
  }

  const size_t in_bytes = static_cast<size_t>(entries) * (qg_row + qu_row);
  const size_t bytes = in_bytes + static_cast<size_t>(entries) * qh_row;
  if (act_scratch_.size() < bytes) act_scratch_.resize(bytes);
  if (thread_scratch_.size() < per_thread * static_cast<size_t>(threads))
    thread_scratch_.resize(per_thread * static_cast<size_t>(threads));
  uint8_t* const qg = act_scratch_.data();
  uint8_t* const qu = shared_input ? qg : qg + static_cast<size_t>(entries) * qg_row;
  uint8_t* const qh = act_scratch_.data() + in_bytes;

  // 1. Inputs, gathered per FFN so that a token tile is one strided run of activation rows.
  pool_.parallel_for(entries, std::max<int64_t>(1, detail::kMinParallelQuantize / n_in),
                     [&](int64_t b, int64_t e) {
                       for (int64_t entry = b; entry < e; ++entry) {
                         const FfnTask& ffn = ffns[group_of(entry_at, n, entry)];
                         const int64_t i = entry - entry_at[&ffn - ffns.data()];
                         const float* row = x + (ffn.in_rows ? detail::raw(ffn.in_rows)[i] : i) * n_in;
                         quantize_g(row, qg + static_cast<size_t>(entry) * qg_row, n_in);
                         if (!shared_input) quantize_u(row, qu + static_cast<size_t>(entry) * qu_row, n_in);
                       }
                     });

  // 2. Gate and up, SwiGLU, quantized down input.
  const auto gate_up_task = [&](int thread, int64_t task) {
    const size_t f = group_of(gate_up_at, n, task);
    const FfnTask& ffn = ffns[f];
    const Tiling t = gate_up_tiling(f);
    const int64_t local = task - gate_up_at[f];
    const int64_t r0 = t.row_begin(local), len = t.row_end(local) - r0;
    const int64_t c0 = t.token_begin(local), cols = t.token_end(local) - c0;
    const int64_t entry0 = entry_at[f] + c0;
    float* g = thread_scratch_.data() + per_thread * static_cast<size_t>(thread);
    float* u = g + cols * len;
    gate_gemm(ffn.gate.row(r0), ffn.gate.row_bytes(), len, qg + static_cast<size_t>(entry0) * qg_row, qg_row,
              cols, n_in, g, static_cast<size_t>(len));
    const size_t u_row = shared_input ? qg_row : qu_row;
    up_gemm(ffn.up.row(r0), ffn.up.row_bytes(), len, qu + static_cast<size_t>(entry0) * u_row, u_row, cols,
            n_in, u, static_cast<size_t>(len));
    const float *gate_bias = detail::raw(ffn.gate_bias), *up_bias = detail::raw(ffn.up_bias);
    if (gate_bias || up_bias)
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t j = 0; j < len; ++j) {
          if (gate_bias) g[c * len + j] += gate_bias[r0 + j];
          if (up_bias) u[c * len + j] += up_bias[r0 + j];
        }
    switch (act.kind) {
      case Activation::SwiGLU:
        for (int64_t i = 0; i < cols * len; ++i) g[i] = detail::silu_mul(g[i], u[i]);
        break;
      case Activation::GeGLU:
        for (int64_t i = 0; i < cols * len; ++i) g[i] = geglu_ggml(g[i], u[i]);
        break;
      case Activation::OaiSwiGLU:
        for (int64_t i = 0; i < cols * len; ++i) g[i] = oai_swiglu(g[i], u[i], act.alpha, act.limit);
        break;
    }
    const size_t segment = static_cast<size_t>(r0 / h_format.block_size) * h_format.type_size;
    for (int64_t c = 0; c < cols; ++c)
      quantize_h(g + c * len, qh + static_cast<size_t>(entry0 + c) * qh_row + segment, len);
  };

  // 3. Down, scattered to the output rows.
  const auto down_task = [&](int thread, int64_t task) {
    const size_t f = group_of(down_at, n, task);
    const FfnTask& ffn = ffns[f];
    const Tiling t = down_tiling(f);
    const int64_t local = task - down_at[f];
    const int64_t r0 = t.row_begin(local), len = t.row_end(local) - r0;
    const int64_t c0 = t.token_begin(local), cols = t.token_end(local) - c0;
    float* o = thread_scratch_.data() + per_thread * static_cast<size_t>(thread);
    down_gemm(ffn.down.row(r0), ffn.down.row_bytes(), len,
              qh + static_cast<size_t>(entry_at[f] + c0) * qh_row, qh_row, cols, n_ff, o,
              static_cast<size_t>(len));
    const int32_t* out_rows = detail::raw(ffn.out_rows);
    const float* down_bias = detail::raw(ffn.down_bias);
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t row = out_rows ? out_rows[c0 + c] : c0 + c;
      if (row < 0 || static_cast<size_t>(row) >= out_rows_held)
        fail("ffn: output row {} is out of range of an output of {} rows", row, out_rows_held);
      float* dst = out + row * n_out + r0;
      const float* src = o + c * len;
      if (!down_bias && ffn.out_scale == 1.0f) {
        std::memcpy(dst, src, static_cast<size_t>(len) * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < len; ++j) {
        float v = src[j];
        if (down_bias) v += down_bias[r0 + j];
        if (ffn.out_scale != 1.0f) v *= ffn.out_scale;
        dst[j] = v;
      }
    }
  };

  // Both as one job: the gate/up tasks first, then the down tasks, each of which waits until every gate/up
  // task of its FFN has finished (a counter per FFN). Tasks are claimed in index order, so by the time a
  // down task is claimed every gate/up task is running or done and the wait ends; the threads that finish
  // the gate/up tasks of the first FFNs early go on to their down tasks instead of waiting for the job's
  // slowest gate/up task (one job boundary fewer per call, and its tail overlapped).
  const int64_t gate_up_tasks = gate_up_at[n];
  if (ffn_ready_capacity_ < n) {
    ffn_ready_ = std::make_unique<std::atomic<int64_t>[]>(n);
    ffn_ready_capacity_ = n;
  }
  for (size_t f = 0; f < n; ++f) ffn_ready_[f].store(0, std::memory_order_relaxed);
  pool_.run_tasks(gate_up_tasks + down_at[n], [&](int thread, int64_t task) {
    if (task < gate_up_tasks) {
      // Counted even when the task throws, so that no down task waits forever (the error reaches the caller).
      struct Done {
        std::atomic<int64_t>& ready;
        ~Done() { ready.fetch_add(1, std::memory_order_release); }
      } done{ffn_ready_[group_of(gate_up_at, n, task)]};
      gate_up_task(thread, task);
      return;
    }
    const int64_t local = task - gate_up_tasks;
    const size_t f = group_of(down_at, n, local);
    const int64_t need = gate_up_at[f + 1] - gate_up_at[f];
    for (int spins = 0; ffn_ready_[f].load(std::memory_order_acquire) < need; ++spins)
      if (spins >= kSpinsBeforeYield) std::this_thread::yield();
    down_task(thread, local);
  });
}

// Groups the T·k entries by expert (ascending ids, tokens in order within an expert), one FFN task per used
// expert, then the grouped ffn(): each row is computed as ffn() computes it, whatever the grouping.
void CpuBackend::routed_ffn(const RoutedExperts& ex, const ActivationParams& act, Buf<const int32_t> ids_buf,
                            int64_t T, int k, Buf<const float> x, Buf<float> out) {
  const size_t n = static_cast<size_t>(T * k), E = static_cast<size_t>(ex.n_expert);
  if (n == 0) return;
  const int32_t* ids = detail::raw(ids_buf.first(n));
  routed_count_.assign(E + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || static_cast<size_t>(ids[i]) >= E)
      fail("routed ffn: expert id {} is out of range ({} experts)", ids[i], E);
    ++routed_count_[static_cast<size_t>(ids[i]) + 1];
  }
  for (size_t e = 0; e < E; ++e) routed_count_[e + 1] += routed_count_[e];  // starts
  routed_in_.resize(n);
  routed_out_.resize(n);
  routed_tasks_.clear();
  for (size_t e = 0; e < E; ++e) {
    const size_t start = static_cast<size_t>(routed_count_[e]);
    size_t at = start;
    for (size_t i = 0; i < n; ++i)
      if (static_cast<size_t>(ids[i]) == e) {
        routed_in_[at] = static_cast<int32_t>(i / static_cast<size_t>(k));
        routed_out_[at++] = static_cast<int32_t>(i);
      }
    if (at == start) continue;
    const int32_t* slot_of = ex.slot_of ? detail::raw(ex.slot_of.first(E)) : nullptr;
    const size_t slot = slot_of ? static_cast<size_t>(slot_of[e]) : e;
    const auto matrix = [slot](const ExpertStack& s) {
      Weight w = s.first;
      w.data = static_cast<const uint8_t*>(s.first.data) + slot * s.stride;
      return w;
    };
    FfnTask t;
    const auto on_host = std::find_if(ex.host.begin(), ex.host.end(), [e](const HostExpert& h) {
      return static_cast<size_t>(h.expert) == e;
    });
    if (on_host != ex.host.end()) {
      t.gate = on_host->gate;
      t.up = on_host->up;
      t.down = on_host->down;
    } else {
      if (slot_of && slot_of[e] < 0) fail("routed ffn: expert {} has no slot and no host matrices", e);
      t.gate = matrix(ex.gate);
      t.up = matrix(ex.up);
      t.down = matrix(ex.down);
    }
    const size_t ff = static_cast<size_t>(ex.gate.first.n_out), no = static_cast<size_t>(ex.down.first.n_out);
    if (ex.gate_bias) t.gate_bias = ex.gate_bias.sub(e * ff, ff);
    if (ex.up_bias) t.up_bias = ex.up_bias.sub(e * ff, ff);
    if (ex.down_bias) t.down_bias = ex.down_bias.sub(e * no, no);
    if (ex.down_scale) t.out_scale = detail::raw(ex.down_scale.first(E))[e];
    t.in_rows = host(routed_in_.data() + start, at - start);
    t.out_rows = host(routed_out_.data() + start, at - start);
    t.n_rows = static_cast<int64_t>(at - start);
    routed_tasks_.push_back(t);
  }
  ffn(routed_tasks_, act, x, T, out);
}

bool CpuBackend::computes_host_experts(const ActivationParams&, const Weight&, const Weight&, const Weight&,
                                       int, bool) const {
  return true;
}

void CpuBackend::routed_ffn_add(const RoutedExperts& ex, const ActivationParams& act, Buf<const int32_t> ids,
                                Buf<const float> weights, int64_t T, int k, Buf<const float> x,
                                Buf<float> out, Buf<float> acc) {
  routed_ffn(ex, act, ids, T, k, x, out);
  moe_combine_add(out, weights, T, k, ex.down.first.n_out, acc);
}

}  // namespace df::backend

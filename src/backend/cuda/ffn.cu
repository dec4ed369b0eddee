// The grouped gated FFN: every task's rows in one launch per stage (gather + quantize, gate/up + bias +
// activation, quantize the activation, down + bias + scale + scatter), whatever the number of tasks. The
// launches read the tasks from a small descriptor table in device memory (FfnDesc, FfnItem) that the host
// stages once per call; a work item is up to 8 rows of one task (up to kFfnMmaCols rows for the tensor-core
// kernels), the y dimension of the grid.
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/mma_tile.cuh"

namespace df::backend::cuda {
namespace {

__device__ __forceinline__ void record(DeviceError* err, int32_t code, int32_t value, int32_t limit) {
  if (atomicCAS(&err->code, 0, code) == 0) {
    err->value = value;
    err->limit = limit;
  }
}

__global__ void ffn_row_map_kernel(const int32_t* entry_task, const FfnDesc* descs, int64_t entries,
                                   int64_t x_rows, int32_t* row_map, DeviceError* err) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= entries) return;
  const FfnDesc& d = descs[entry_task[e]];
  const int32_t local = static_cast<int32_t>(e - d.entry0);
  int32_t row = d.in_rows ? d.in_rows[local] : local;
  if (row < 0 || row >= x_rows) {
    record(err, kErrFfnInRow, row, static_cast<int32_t>(x_rows));
    row = 0;
  }
  row_map[e] = row;
}

__global__ void routed_tables_kernel(ExpertStacks st, const int32_t* ids, int64_t entries, int k,
                                     FfnDesc* descs, FfnItem* items, int32_t* entry_task, int32_t* rows,
                                     DeviceError* err) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= entries) return;
  int32_t e = ids[i];
  if (e < 0 || e >= st.n_expert) {
    record(err, kErrExpertId, e, st.n_expert);
    e = 0;
  }
  const size_t ue = static_cast<size_t>(e);
  rows[2 * i] = static_cast<int32_t>(i / k);  // x row: the token
  rows[2 * i + 1] = static_cast<int32_t>(i);  // out row: the entry
  FfnDesc d;
  d.gate = st.gate + ue * st.gate_stride;
  d.up = st.up + ue * st.up_stride;
  d.down = st.down + ue * st.down_stride;
  d.gate_bias = st.gate_bias ? st.gate_bias + ue * st.n_ff : nullptr;
  d.up_bias = st.up_bias ? st.up_bias + ue * st.n_ff : nullptr;
  d.down_bias = st.down_bias ? st.down_bias + ue * st.n_out : nullptr;
  d.in_rows = rows + 2 * i;
  d.out_rows = rows + 2 * i + 1;
  d.out_scale = 1.0f;
  d.entry0 = static_cast<int32_t>(i);
  d.n_rows = 1;
  descs[i] = d;
  items[i] = FfnItem{static_cast<int32_t>(i), 0, 1};
  entry_task[i] = static_cast<int32_t>(i);
}

// The activations exactly as the CPU's ffn.cpp evaluates them (same operations, same order).
__device__ __forceinline__ float gelu_ggml(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  const float h = round_f16(x);
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoefA = 0.044715f;
  const float g = 0.5f * h * (1.0f + tanhf(kSqrt2OverPi * h * (1.0f + kCoefA * h * h)));
  return round_f16(g);
}
__device__ __forceinline__ float activate(const FfnShape& s, float g, float u) {
  switch (s.act) {
    case FfnAct::SwiGLU:
      return g / (1.0f + expf(-g)) * u;
    case FfnAct::GeGLU:
      return gelu_ggml(g) * u;
    default: {
      const float x = fminf(g, s.limit);
      const float y = fmaxf(fminf(u, s.limit), -s.limit);
      return x / (1.0f + expf(s.alpha * -x)) * (y + 1.0f);
    }
  }
}

// kMode 0: gate and up of the same type, fused; 1: gate only, activation against up's products in u_buf;
// 2: up only, products (+ bias) to u_buf.
template <class T, int NC, int kMode>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    ffn_gate_up_kernel(FfnShape s, const FfnDesc* descs, const FfnItem* items, const uint8_t* qg,
                       size_t qg_stride, const uint8_t* qu, size_t qu_stride, float* h, float* u_buf) {
  __shared__ __align__(16) uint8_t smem[kWarpsPerBlock][kSmemPerWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (o >= s.n_ff) return;
  const FfnItem it = items[blockIdx.y];
  const FfnDesc& d = descs[it.task];
  const int64_t e0 = d.entry0 + it.local0;
  typename T::Acc g[NC], u[NC];
  if (kMode != 2)
    row_dot<T, NC>(d.gate + o * s.gate_row_bytes, s.n_in, qg + e0 * qg_stride, qg_stride, it.cols, smem[warp],
                   g);
  if (kMode != 1)
    row_dot<T, NC>(d.up + o * s.up_row_bytes, s.n_in, qu + e0 * qu_stride, qu_stride, it.cols, smem[warp], u);
  if (lane != 0) return;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    if (c >= it.cols) break;
    const int64_t e = e0 + c;
    if (kMode == 2) {
      float uv = static_cast<float>(u[c]);
      if (d.up_bias) uv += d.up_bias[o];
      u_buf[e * s.n_ff + o] = uv;
      continue;
    }
    float gv = static_cast<float>(g[c]);
    if (d.gate_bias) gv += d.gate_bias[o];
    float uv;
    if (kMode == 0) {
      uv = static_cast<float>(u[c]);
      if (d.up_bias) uv += d.up_bias[o];
    } else {
      uv = u_buf[e * s.n_ff + o];
    }
    h[e * s.n_ff + o] = activate(s, gv, uv);
  }
}

template <class T, int NC>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    ffn_down_kernel(FfnShape s, const FfnDesc* descs, const FfnItem* items, const uint8_t* qh,
                    size_t qh_stride, float* out, int64_t out_rows_total, DeviceError* err) {
  __shared__ __align__(16) uint8_t smem[kWarpsPerBlock][kSmemPerWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (o >= s.n_out) return;
  const FfnItem it = items[blockIdx.y];
  const FfnDesc& d = descs[it.task];
  const int64_t e0 = d.entry0 + it.local0;
  typename T::Acc acc[NC];
  row_dot<T, NC>(d.down + o * s.down_row_bytes, s.n_ff, qh + e0 * qh_stride, qh_stride, it.cols, smem[warp],
                 acc);
  if (lane != 0) return;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    if (c >= it.cols) break;
    const int32_t local = it.local0 + c;
    const int32_t row = d.out_rows ? d.out_rows[local] : local;
    if (row < 0 || row >= out_rows_total) {
      record(err, kErrFfnOutRow, row, static_cast<int32_t>(out_rows_total));
      continue;
    }
    float v = static_cast<float>(acc[c]);
    if (d.down_bias) v += d.down_bias[o];
    if (d.out_scale != 1.0f) v *= d.out_scale;
    out[row * s.n_out + o] = v;
  }
}

// Items of more than 8 rows (prefill chunks; the host makes them only when gate and up share a type and
// it and down's are mma_supported): int8 tensor-core tiles, 64 output rows × up to kFfnMmaCols entries a
// block. The epilogues are those of the kernels above.
static_assert(kFfnMmaCols == kMmaCols, "an FFN work item is one mma column tile");

template <class W>
__global__ void __launch_bounds__(kMmaWarps* kWarp)
    ffn_gate_up_mma_kernel(FfnShape s, const FfnDesc* descs, const FfnItem* items, const uint8_t* qg,
                           size_t qg_stride, float* h) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kMmaRowsPerBlock + warp * 16;
  if (o0 >= s.n_ff) return;
  const FfnItem it = items[blockIdx.y];
  const FfnDesc& d = descs[it.task];
  const int64_t e0 = d.entry0 + it.local0;
  float acc[2][kMmaCols / 8][4];  // gate, up
  const uint8_t* const ws[2] = {d.gate, d.up};
  const size_t rbs[2] = {s.gate_row_bytes, s.up_row_bytes};
  mma_rows<W, kMmaCols, 2>(ws, rbs, s.n_ff, o0, s.n_in, qg + e0 * qg_stride, qg_stride, it.cols, acc);
#pragma unroll
  for (int j = 0; j < kMmaCols / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t o = o0 + g + (i >= 2 ? 8 : 0);
      const int c = j * 8 + 2 * t + (i & 1);
      if (o >= s.n_ff || c >= it.cols) continue;
      float gv = acc[0][j][i], uv = acc[1][j][i];
      if (d.gate_bias) gv += d.gate_bias[o];
      if (d.up_bias) uv += d.up_bias[o];
      h[(e0 + c) * s.n_ff + o] = activate(s, gv, uv);
    }
}

template <class W>
__global__ void __launch_bounds__(kMmaWarps* kWarp)
    ffn_down_mma_kernel(FfnShape s, const FfnDesc* descs, const FfnItem* items, const uint8_t* qh,
                        size_t qh_stride, float* out, int64_t out_rows_total, DeviceError* err) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kMmaRowsPerBlock + warp * 16;
  if (o0 >= s.n_out) return;
  const FfnItem it = items[blockIdx.y];
  const FfnDesc& d = descs[it.task];
  const int64_t e0 = d.entry0 + it.local0;
  float acc[1][kMmaCols / 8][4];
  const uint8_t* const ws[1] = {d.down};
  const size_t rbs[1] = {s.down_row_bytes};
  mma_rows<W, kMmaCols, 1>(ws, rbs, s.n_out, o0, s.n_ff, qh + e0 * qh_stride, qh_stride, it.cols, acc);
#pragma unroll
  for (int j = 0; j < kMmaCols / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t o = o0 + g + (i >= 2 ? 8 : 0);
      const int c = j * 8 + 2 * t + (i & 1);
      if (o >= s.n_out || c >= it.cols) continue;
      const int32_t local = it.local0 + c;
      const int32_t row = d.out_rows ? d.out_rows[local] : local;
      if (row < 0 || row >= out_rows_total) {
        record(err, kErrFfnOutRow, row, static_cast<int32_t>(out_rows_total));
        continue;
      }
      float v = acc[0][j][i];
      if (d.down_bias) v += d.down_bias[o];
      if (d.out_scale != 1.0f) v *= d.out_scale;
      out[row * s.n_out + o] = v;
    }
}

}  // namespace

void launch_ffn_gather_quantize(GgmlType act, const float* x, int64_t x_rows, int64_t n_in,
                                const int32_t* entry_task, const FfnDesc* descs, int64_t entries,
                                int32_t* row_map, uint8_t* dst, DeviceError* err, cudaStream_t stream) {
  if (entries <= 0) return;
  ffn_row_map_kernel<<<static_cast<unsigned>((entries + 127) / 128), 128, 0, stream>>>(
      entry_task, descs, entries, x_rows, row_map, err);
  check_launch("ffn row map kernel");
  launch_quantize(act, x, n_in, row_map, entries, n_in, dst, stream);
}

void launch_ffn_gate_up(const FfnShape& s, const FfnDesc* descs, const FfnItem* items, int64_t n_items,
                        const uint8_t* qg, size_t qg_stride, const uint8_t* qu, size_t qu_stride, float* h,
                        float* u_scratch, int64_t, cudaStream_t stream) {
  if (n_items <= 0 || s.n_ff <= 0) return;
  if (s.max_cols > 8) {
    const dim3 grid(static_cast<unsigned>((s.n_ff + kMmaRowsPerBlock - 1) / kMmaRowsPerBlock),
                    static_cast<unsigned>(n_items));
    with_mma_weight(s.gate_type, [&]<class W>() {
      ffn_gate_up_mma_kernel<W><<<grid, kMmaWarps * kWarp, 0, stream>>>(s, descs, items, qg, qg_stride, h);
    });
    check_launch("ffn gate/up kernel (mma)");
    return;
  }
  const dim3 grid(static_cast<unsigned>((s.n_ff + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(n_items));
  const unsigned threads = kWarpsPerBlock * kWarp;
  // The column tile covers the largest item (smaller items skip the extra columns at run time); a decode
  // step's items all have one row and get the lean 1-column kernel.
  with_col_tile(col_tile(s.max_cols), [&]<int NC>() {
    if (s.gate_type == s.up_type) {
      with_weight_traits(s.gate_type, [&]<class T>() {
        ffn_gate_up_kernel<T, NC, 0>
            <<<grid, threads, 0, stream>>>(s, descs, items, qg, qg_stride, qu, qu_stride, h, nullptr);
      });
    } else {
      with_weight_traits(s.up_type, [&]<class T>() {
        ffn_gate_up_kernel<T, NC, 2>
            <<<grid, threads, 0, stream>>>(s, descs, items, qg, qg_stride, qu, qu_stride, h, u_scratch);
      });
      check_launch("ffn up kernel");
      with_weight_traits(s.gate_type, [&]<class T>() {
        ffn_gate_up_kernel<T, NC, 1>
            <<<grid, threads, 0, stream>>>(s, descs, items, qg, qg_stride, qu, qu_stride, h, u_scratch);
      });
    }
  });
  check_launch("ffn gate/up kernel");
}

void launch_ffn_down(const FfnShape& s, const FfnDesc* descs, const FfnItem* items, int64_t n_items,
                     const uint8_t* qh, size_t qh_stride, float* out, int64_t out_rows_total,
                     DeviceError* err, cudaStream_t stream) {
  if (n_items <= 0 || s.n_out <= 0) return;
  if (s.max_cols > 8) {
    const dim3 grid(static_cast<unsigned>((s.n_out + kMmaRowsPerBlock - 1) / kMmaRowsPerBlock),
                    static_cast<unsigned>(n_items));
    with_mma_weight(s.down_type, [&]<class W>() {
      ffn_down_mma_kernel<W>
          <<<grid, kMmaWarps * kWarp, 0, stream>>>(s, descs, items, qh, qh_stride, out, out_rows_total, err);
    });
    check_launch("ffn down kernel (mma)");
    return;
  }
  const dim3 grid(static_cast<unsigned>((s.n_out + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(n_items));
  with_col_tile(col_tile(s.max_cols), [&]<int NC>() {
    with_weight_traits(s.down_type, [&]<class T>() {
      ffn_down_kernel<T, NC><<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(s, descs, items, qh, qh_stride, out,
                                                                          out_rows_total, err);
    });
  });
  check_launch("ffn down kernel");
}

void launch_routed_tables(const ExpertStacks& st, const int32_t* ids, int64_t entries, int k, FfnDesc* descs,
                          FfnItem* items, int32_t* entry_task, int32_t* rows, DeviceError* err,
                          cudaStream_t stream) {
  if (entries <= 0) return;
  const int threads = 128;
  routed_tables_kernel<<<static_cast<unsigned>((entries + threads - 1) / threads), threads, 0, stream>>>(
      st, ids, entries, k, descs, items, entry_task, rows, err);
}

}  // namespace df::backend::cuda

// The grouped gated FFN: every task's rows in one launch per stage (gather + quantize, gate/up + bias +
// activation, quantize the activation, down + bias + scale + scatter), whatever the number of tasks. The
// launches read the tasks from a small descriptor table in device memory (FfnDesc, FfnItem) that the host
// stages once per call; a work item is up to 8 rows of one task (up to kFfnMmaCols rows for the tensor-core
// kernels), the y dimension of the grid.
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/mma_tile.cuh"
#include "backend/cuda/q8_block.cuh"
#include "quant/portable_exp.h"

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
  pdl_begin();
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

// The descriptor of routed entry i = t · k + j (expert ids[i], one row: x row t, out row i), as
// launch_routed_tables documents it; its row lists are left to the caller. An id out of range is recorded
// and read as 0. kPastL1: the slot map read with __ldcg (ffn_down_combine_kernel's reads before its wait).
template <bool kPastL1 = false>
__device__ __forceinline__ FfnDesc routed_desc(const ExpertStacks& st, int32_t e, int64_t i,
                                               DeviceError* err) {
  if (e < 0 || e >= st.n_expert) {
    record(err, kErrExpertId, e, st.n_expert);
    e = 0;
  }
  const size_t ue = static_cast<size_t>(e);
  const int32_t slot = !st.slot_of ? e : kPastL1 ? __ldcg(st.slot_of + e) : st.slot_of[e];
  const size_t us = static_cast<size_t>(slot);
  FfnDesc d;
  // A negative slot: the host computes this expert (RoutedExperts::host); its descriptor has no weights.
  d.gate = slot < 0 ? nullptr : st.gate + us * st.gate_stride;
  d.up = slot < 0 ? nullptr : st.up + us * st.up_stride;
  d.down = slot < 0 ? nullptr : st.down + us * st.down_stride;
  d.gate_bias = st.gate_bias ? st.gate_bias + ue * st.n_ff : nullptr;
  d.up_bias = st.up_bias ? st.up_bias + ue * st.n_ff : nullptr;
  d.down_bias = st.down_bias ? st.down_bias + ue * st.n_out : nullptr;
  d.in_rows = nullptr;
  d.out_rows = nullptr;
  d.out_scale = st.down_scale ? st.down_scale[ue] : 1.0f;
  d.entry0 = static_cast<int32_t>(i);
  d.n_rows = 1;
  return d;
}

__global__ void routed_tables_kernel(ExpertStacks st, const int32_t* ids, int64_t entries, int k,
                                     FfnDesc* descs, FfnItem* items, int32_t* entry_task, int32_t* row_map,
                                     int32_t* rows, DeviceError* err) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= entries) return;
  rows[2 * i] = static_cast<int32_t>(i / k);  // x row: the token
  row_map[i] = static_cast<int32_t>(i / k);   // the same, for the input's gather (no row-map launch)
  rows[2 * i + 1] = static_cast<int32_t>(i);  // out row: the entry
  FfnDesc d = routed_desc(st, ids[i], i, err);
  d.in_rows = rows + 2 * i;
  d.out_rows = rows + 2 * i + 1;
  descs[i] = d;
  items[i] = FfnItem{static_cast<int32_t>(i), 0, 1};
  entry_task[i] = static_cast<int32_t>(i);
}

// A block's work item and its task's descriptor: from the tables, or (kRouted) routed entry blockIdx.y
// itself, read from the routing ids (no table launch before the FFN's).
template <bool kRouted>
__device__ __forceinline__ void block_work(const FfnDesc* descs, const FfnItem* items, const RoutedSource& rs,
                                           FfnItem& it, FfnDesc& d) {
  if constexpr (kRouted) {
    const int64_t i = blockIdx.y;
    it = FfnItem{static_cast<int32_t>(i), 0, 1};
    d = routed_desc(rs.st, rs.ids[i], i, rs.err);
  } else {
    it = items[blockIdx.y];
    d = descs[it.task];
  }
}

// The activations as the CPU's ffn.cpp evaluates them (same operations, same order; GeGLU is ggml's
// f16-table GELU with its FMA, see ffn.cpp). SwiGLU's exp is quant::portable_expf (IEEE-exact operations
// only), so that the host can reproduce a routed expert's bits (--cpu-misses, cuda_host/warp_order.h); the
// others' expf and tanhf are CUDA's, within 2 ulp of glibc's (the f16 rounding of the GELU absorbs most of
// that).
__device__ __forceinline__ float geglu_ggml(float g, float u) {
  if (g <= -10.0f) return 0.0f;
  if (g >= 10.0f) return g * u;
  const float h = round_f16(g);
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoefA = 0.044715f;
  const float t = tanhf(kSqrt2OverPi * h * fmaf(kCoefA * h, h, 1.0f));
  return round_f16(0.5f * h * (1.0f + t)) * u;
}
__device__ __forceinline__ float activate(const FfnShape& s, float g, float u) {
  switch (s.act) {
    case FfnAct::SwiGLU:
      return quant::portable_swiglu(g, u);
    case FfnAct::GeGLU:
      return geglu_ggml(g, u);
    default: {
      const float x = fminf(g, s.limit);
      const float y = fmaxf(fminf(u, s.limit), -s.limit);
      return x / (1.0f + expf(s.alpha * -x)) * (y + 1.0f);
    }
  }
}

// kMode 0: gate and up of the same type, fused (they share the quantized input: qg); 1: gate only,
// activation against up's products in u_buf; 2: up only, products (+ bias) to u_buf. A warp computes
// kRowsPerWarp output rows: in mode 0 their gate and up rows, 2 * kRowsPerWarp weight rows in flight.
// kQuantize (mode 0 only): the block quantizes its entries' input rows x_raw + row_map[entry] * n_in
// (kRouted: the entry's token, entry / k) into shared memory, in place of qg, while the first weight chunks
// load.
//
// The routed 8-warp blocks (Q4_0) ask for three blocks an SM: left to itself, ptxas aimed at four (64
// registers) and spilled 48 bytes a thread, which ncu saw as local-memory traffic in every call; at three
// it takes 80 registers, spills nothing, and lfm2-24b's 384 blocks (96 for each of a token's 4 experts)
// still fit the H100's 132 SMs in one wave. Session 29: +2.5 % decode on lfm2-24b (H100). 0: ptxas's own
// choice.
__host__ __device__ constexpr int routed_gate_up_min_blocks(bool routed, int warps) {
  return routed && warps == 8 ? 3 : 0;
}
template <class T, int NC, int kMode, bool kQuantize, bool kRouted, int kWarps = kWarpsPerBlock>
__global__ void __launch_bounds__(kWarps* kWarp, routed_gate_up_min_blocks(kRouted, kWarps))
    ffn_gate_up_kernel(FfnShape s, const FfnDesc* descs, const FfnItem* items, const uint8_t* qg,
                       size_t qg_stride, const uint8_t* qu, size_t qu_stride, float* h, float* u_buf,
                       const float* x_raw, const int32_t* row_map, RoutedSource rs) {
  pdl_begin();
  static_assert(!kQuantize || kMode == 0, "in-kernel quantization serves the fused gate/up kernel");
  static_assert(!kRouted || (kQuantize && NC == 1), "routed entries are single rows quantized in the kernel");
  constexpr int kPerRow = kMode == 0 ? 2 : 1, R = kRowsPerWarp * kPerRow;
  __shared__ __align__(16) uint8_t smem[kWarps][R * smem_slot<T>()];
  extern __shared__ __align__(16) uint8_t act_smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRowsPerWarp;
  FfnItem it;
  FfnDesc d;
  block_work<kRouted>(descs, items, rs, it, d);
  if (kRouted && d.gate == nullptr) return;  // a host-computed entry: the whole block has nothing to do
  const int64_t e0 = d.entry0 + it.local0;
  const uint8_t* act = kMode == 2 ? qu + e0 * qu_stride : qg + e0 * qg_stride;
  size_t act_stride = kMode == 2 ? qu_stride : qg_stride;
  if constexpr (kQuantize) {
    act_stride = act_row_stride(GgmlType::Q8_0, s.n_in);
    act = act_smem;
  }
  // A warp past the last row reads the last row (and writes nothing): the prologue's block
  // synchronisation needs every warp.
  const uint8_t* rows[R];
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int64_t o = o0 + j < s.n_ff ? o0 + j : s.n_ff - 1;
    if (kMode != 2) rows[j * kPerRow] = d.gate + o * s.gate_row_bytes;
    if (kMode != 1) rows[j * kPerRow + kPerRow - 1] = d.up + o * s.up_row_bytes;
  }
  typename T::Acc acc[R][NC];
  rows_dot<T, NC, R>(rows, s.n_in, act, act_stride, it.cols, smem[warp], acc, [&] {
    if constexpr (kQuantize) {
      block_quantize_q8_0(
          [&](int c) {
            const int64_t row = kRouted ? (e0 + c) / rs.k : static_cast<int64_t>(row_map[e0 + c]);
            return x_raw + row * s.n_in;
          },
          it.cols, s.n_in, act_smem, act_stride);
      __syncthreads();
    }
  });
  if (lane != 0) return;
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j) {
    const int64_t o = o0 + j;
    if (o >= s.n_ff) break;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c >= it.cols) break;
      const int64_t e = e0 + c;
      if (kMode == 2) {
        float uv = static_cast<float>(acc[j][c]);
        if (d.up_bias) uv += d.up_bias[o];
        u_buf[e * s.n_ff + o] = uv;
        continue;
      }
      float gv = static_cast<float>(acc[j * kPerRow][c]);
      if (d.gate_bias) gv += d.gate_bias[o];
      float uv;
      if (kMode == 0) {
        uv = static_cast<float>(acc[j * kPerRow + 1][c]);
        if (d.up_bias) uv += d.up_bias[o];
      } else {
        uv = u_buf[e * s.n_ff + o];
      }
      h[e * s.n_ff + o] = activate(s, gv, uv);
    }
  }
}

// The routed gate/up of the combine path (launch_routed_gate_up_q8): ffn_gate_up_kernel's routed one-row
// products, but a warp takes kQhRowsPerWarp rows, so that a block of kQhWarps owns a whole 32-value group of
// its entry's h (n_ff a multiple of 32), and the block writes h quantized to Q8_0 (act_row_stride rows) with
// the bytes block_quantize_q8_0 makes of the floats: the down/combine blocks then copy 6.9 KB of quantized
// rows, where each read the 24 KB of h floats and quantized them after its wait (docs/PERF.md, session 31).
// Eight rows a warp need more staging than static shared memory allows: all of it is dynamic (the warps'
// staging, the quantized input row, the block's 32 values of h).
constexpr int kQhRowsPerWarp = 4, kQhWarps = 8, kQhGroup = kQhRowsPerWarp * kQhWarps;
static_assert(kQhGroup == 32, "a block's rows of h are one Q8_0 group");
template <class T>
size_t routed_gate_up_q8_smem(int64_t n_in) {
  return static_cast<size_t>(kQhWarps * 2 * kQhRowsPerWarp * smem_slot<T>()) +
         act_row_stride(GgmlType::Q8_0, n_in) + kQhGroup * sizeof(float);
}
// kPreQuantized: the entries' input rows come as Q8_0 rows (xq: the one-cluster router's, which its blocks
// other than the routing one quantize meanwhile; quantized_output), and the prologue copies the token's row
// into shared memory where it would quantize x (~585 instructions a thread, after the wait for x; ncu,
// session 36). Read from global memory inside the dot loop instead it decoded no faster (session 36).
template <class T, bool kPreQuantized>
__global__ void __launch_bounds__(kQhWarps* kWarp, 2)
    routed_gate_up_q8_kernel(FfnShape s, const float* x, const uint8_t* xq, uint8_t* qh, RoutedSource rs) {
  constexpr int R = 2 * kQhRowsPerWarp;  // gate and up rows
  extern __shared__ __align__(16) uint8_t dyn_smem[];
  uint8_t* act_smem = dyn_smem + kQhWarps * R * smem_slot<T>();
  const size_t act_stride = act_row_stride(GgmlType::Q8_0, s.n_in);
  auto* h_group = reinterpret_cast<float*>(act_smem + act_stride);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t e = blockIdx.y;
  pdl_begin();  // the routing ids come from the previous kernel
  const FfnDesc d = routed_desc(rs.st, rs.ids[e], e, rs.err);
  if (d.gate == nullptr) return;  // a host-computed entry: the whole block has nothing to do
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kQhGroup + warp * kQhRowsPerWarp;
  const uint8_t* rows[R];
#pragma unroll
  for (int j = 0; j < kQhRowsPerWarp; ++j) {
    rows[2 * j] = d.gate + (o0 + j) * s.gate_row_bytes;
    rows[2 * j + 1] = d.up + (o0 + j) * s.up_row_bytes;
  }
  typename T::Acc acc[R][1];
  uint8_t* const staging = dyn_smem + warp * R * smem_slot<T>();
  if constexpr (kPreQuantized) {
    rows_dot<T, 1, R>(rows, s.n_in, act_smem, act_stride, 1, staging, acc,
                      [&] { block_copy_act_rows(xq + (e / rs.k) * act_stride, act_stride, act_smem); });
  } else {
    rows_dot<T, 1, R>(rows, s.n_in, act_smem, act_stride, 1, staging, acc, [&] {
      block_quantize_q8_0([&](int) { return x + (e / rs.k) * s.n_in; }, 1, s.n_in, act_smem, act_stride);
      __syncthreads();
    });
  }
  // Lane j activates row j (warp_sum left every lane the sums): four short chains, not one long one.
  if (lane < kQhRowsPerWarp) {
    float gv = 0.0f, uv = 0.0f;
#pragma unroll
    for (int j = 0; j < kQhRowsPerWarp; ++j)
      if (lane == j) {
        gv = static_cast<float>(acc[2 * j][0]);
        uv = static_cast<float>(acc[2 * j + 1][0]);
      }
    const int64_t o = o0 + lane;
    if (d.gate_bias) gv += d.gate_bias[o];
    if (d.up_bias) uv += d.up_bias[o];
    h_group[warp * kQhRowsPerWarp + lane] = activate(s, gv, uv);
  }
  __syncthreads();
  if (warp == 0)
    warp_quantize_q8_0_group(h_group[lane], qh + e * act_row_stride(GgmlType::Q8_0, s.n_ff), s.n_ff,
                             blockIdx.x);
}

// kQuantize: the block quantizes its entries' rows of h_raw (n_ff floats apart) into shared memory, in place
// of qh, while the first weight chunks load. kRouted: the output row is the entry.
template <class T, int NC, bool kQuantize, bool kRouted, int kWarps = kWarpsPerBlock, bool kStage = false>
__global__ void __launch_bounds__(kWarps* kWarp)
    ffn_down_kernel(FfnShape s, const FfnDesc* descs, const FfnItem* items, const uint8_t* qh,
                    size_t qh_stride, float* out, int64_t out_rows_total, DeviceError* err,
                    const float* h_raw, RoutedSource rs) {
  pdl_begin();
  static_assert(!kRouted || (kQuantize && NC == 1), "routed entries are single rows quantized in the kernel");
  static_assert(!kStage || (!kQuantize && stages_act(T::kType, NC)), "a staged input is one Q8_0 row");
  __shared__ __align__(16) uint8_t smem[kWarps][kRowsPerWarp * smem_slot<T>()];
  extern __shared__ __align__(16) uint8_t act_smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRowsPerWarp;
  FfnItem it;
  FfnDesc d;
  block_work<kRouted>(descs, items, rs, it, d);
  if (kRouted && d.down == nullptr) {  // host-computed entries go through the combine kernel only
    if (threadIdx.x == 0) record(rs.err, kErrExpertId, rs.ids[blockIdx.y], -1);
    return;
  }
  const int64_t e0 = d.entry0 + it.local0;
  const uint8_t* act = qh + e0 * qh_stride;
  const uint8_t* global_act = act;
  if constexpr (kQuantize || kStage) {
    qh_stride = act_row_stride(GgmlType::Q8_0, s.n_ff);
    act = act_smem;
  }
  const uint8_t* rows[kRowsPerWarp];  // past the last row: the last row again, as in the gate/up kernel
#pragma unroll
  for (int j = 0; j < kRowsPerWarp; ++j)
    rows[j] = d.down + (o0 + j < s.n_out ? o0 + j : s.n_out - 1) * s.down_row_bytes;
  typename T::Acc acc[kRowsPerWarp][NC];
  rows_dot<T, NC, kRowsPerWarp>(rows, s.n_ff, act, qh_stride, it.cols, smem[warp], acc, [&] {
    if constexpr (kQuantize) {
      block_quantize_q8_0([&](int c) { return h_raw + (e0 + c) * s.n_ff; }, it.cols, s.n_ff, act_smem,
                          qh_stride);
      __syncthreads();
    }
    if constexpr (kStage) stage_act_row(global_act, s.n_ff, act_smem);
  });
  if (lane != 0) return;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    if (c >= it.cols) break;
    const int32_t local = it.local0 + c;
    const int64_t row = kRouted ? e0 + c : d.out_rows ? d.out_rows[local] : local;
    if (row < 0 || row >= out_rows_total) {
      record(err, kErrFfnOutRow, static_cast<int32_t>(row), static_cast<int32_t>(out_rows_total));
      continue;
    }
#pragma unroll
    for (int j = 0; j < kRowsPerWarp; ++j) {
      const int64_t o = o0 + j;
      if (o >= s.n_out) break;
      float v = static_cast<float>(acc[j][c]);
      if (d.down_bias) v += d.down_bias[o];
      if (d.out_scale != 1.0f) v *= d.out_scale;
      out[row * s.n_out + o] = v;
    }
  }
}

// Warps (output rows) per block of the routed down/combine kernel: each block quantized all K of the token's
// h rows before its products (now it copies them, quantized by the gate/up kernel), so fewer, larger blocks
// repeat that less (4 warps: 512 blocks each reading the 24 KB of h from L2 for a 2,048-row down, more than
// its 7 MB of weights; session 28, measured together with the cooperative quantizer: no decode change alone,
// the reads before the wait below then mattered). Eight past k = 4, so that the staging of k = 6-8 rows of
// 2 KB chunks per warp fits a block's shared memory.
__host__ __device__ constexpr int combine_warps(int k) { return k <= 4 ? 16 : 8; }

// The routed down product with the MoE combine: a block per token (grid y) and combine_warps(K) output rows
// (grid x), a warp per output row. The warp meets the row of each of the token's K experts with that entry's
// own h row (rows_dot's diagonal), then lane 0 forms each entry's value as ffn_down_kernel does and their
// weighted sum in slot order as moe_combine_add_kernel does, and adds it to acc. Shared memory (dynamic): the
// warps' staging, then the K quantized h rows, copied from qh (routed_gate_up_q8_kernel's) after the wait. An
// entry whose expert the host computed (a negative slot) takes its down sums from host_v (entries x n_out,
// the values rows_dot would have formed) in place of its product; the warp reads slot 0's row for it
// meanwhile, so that every warp's rows stay valid. The routing and the down rows are read before the wait for
// the previous kernel (the gate/up product, or the copy of the host's sums after it), so the down weights
// load while gate/up finishes (session 28: about half of +5 % decode on lfm2-24b). They were written before
// that kernel began: the ids by the routing before the gate/up kernel's own wait, a tier's slot map and
// records before its stream reached the gate/up kernel; and this kernel starts only once every block of its
// predecessor has passed its wait. The reads bypass L1 (__ldcg), which a kernel that ran earlier on the SM
// may have left holding older values.
template <class T, int K>
__global__ void __launch_bounds__(combine_warps(K) * kWarp)
    ffn_down_combine_kernel(FfnShape s, const uint8_t* qh, const float* weights, float* acc_rows,
                            RoutedSource rs, const float* host_v) {
  extern __shared__ __align__(16) uint8_t combine_smem[];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t t = blockIdx.y;
  const int64_t o_own = static_cast<int64_t>(blockIdx.x) * combine_warps(K) + warp;
  const int64_t o = o_own < s.n_out ? o_own : s.n_out - 1;  // past the last row: the last row, unwritten
  FfnDesc d[K];
  const uint8_t* rows[K];
#pragma unroll
  for (int j = 0; j < K; ++j) {
    d[j] = routed_desc<true>(rs.st, __ldcg(rs.ids + t * K + j), t * K + j, rs.err);
    rows[j] = (d[j].down ? d[j].down : rs.st.down) + o * s.down_row_bytes;
  }
  const size_t stride = act_row_stride(GgmlType::Q8_0, s.n_ff);
  uint8_t* act = combine_smem + combine_warps(K) * K * smem_slot<T>();
  typename T::Acc acc[K][1];
  rows_dot<T, 1, K, true>(rows, s.n_ff, act, stride, 1, combine_smem + warp * K * smem_slot<T>(), acc, [&] {
    pdl_begin();
    block_copy_act_rows(qh + t * K * stride, K * stride, act);
  });
  if (lane != 0 || o_own >= s.n_out) return;
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < K; ++j) {
    float v = d[j].down ? static_cast<float>(acc[j][0]) : host_v[(t * K + j) * s.n_out + o];
    if (d[j].down_bias) v += d[j].down_bias[o];
    if (d[j].out_scale != 1.0f) v *= d[j].out_scale;
    const float w = weights[t * K + j];
    sum = j == 0 ? v * w : sum + v * w;
  }
  float* y = acc_rows + t * s.n_out + o;
  *y = *y + sum;
}

// Items of more than 8 rows (prefill chunks; the host makes them only when gate and up share a type and
// it and down's are mma_supported): int8 tensor-core tiles, 64 output rows × up to kFfnMmaCols entries a
// block. The epilogues are those of the kernels above.
static_assert(kFfnMmaCols == kMmaCols, "an FFN work item is one mma column tile");

template <class W>
__global__ void __launch_bounds__(kMmaWarps* kWarp)
    ffn_gate_up_mma_kernel(FfnShape s, const FfnDesc* descs, const FfnItem* items, const uint8_t* qg,
                           size_t qg_stride, float* h) {
  pdl_begin();
  const int warp = threadIdx.x / kWarp;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kMmaRowsPerBlock + warp * 16;
  const FfnItem it = items[blockIdx.y];
  const FfnDesc& d = descs[it.task];
  const int64_t e0 = d.entry0 + it.local0;
  float acc[2][kMmaCols / 8][4];  // gate, up
  const uint8_t* const ws[2] = {d.gate, d.up};
  const size_t rbs[2] = {s.gate_row_bytes, s.up_row_bytes};
  mma_rows<W, kMmaCols, 2>(ws, rbs, s.n_ff, o0, s.n_in, qg + e0 * qg_stride, qg_stride, it.cols, acc);
  for_each_fragment(o0, [&](int64_t o, int c, int j, int i) {
    if (o >= s.n_ff || c >= it.cols) return;
    float gv = acc[0][j][i], uv = acc[1][j][i];
    if (d.gate_bias) gv += d.gate_bias[o];
    if (d.up_bias) uv += d.up_bias[o];
    h[(e0 + c) * s.n_ff + o] = activate(s, gv, uv);
  });
}

template <class W>
__global__ void __launch_bounds__(kMmaWarps* kWarp)
    ffn_down_mma_kernel(FfnShape s, const FfnDesc* descs, const FfnItem* items, const uint8_t* qh,
                        size_t qh_stride, float* out, int64_t out_rows_total, DeviceError* err) {
  pdl_begin();
  const int warp = threadIdx.x / kWarp;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kMmaRowsPerBlock + warp * 16;
  const FfnItem it = items[blockIdx.y];
  const FfnDesc& d = descs[it.task];
  const int64_t e0 = d.entry0 + it.local0;
  float acc[1][kMmaCols / 8][4];
  const uint8_t* const ws[1] = {d.down};
  const size_t rbs[1] = {s.down_row_bytes};
  mma_rows<W, kMmaCols, 1>(ws, rbs, s.n_out, o0, s.n_ff, qh + e0 * qh_stride, qh_stride, it.cols, acc);
  for_each_fragment(o0, [&](int64_t o, int c, int j, int i) {
    if (o >= s.n_out || c >= it.cols) return;
    const int32_t local = it.local0 + c;
    const int32_t row = d.out_rows ? d.out_rows[local] : local;
    if (row < 0 || row >= out_rows_total) {
      record(err, kErrFfnOutRow, row, static_cast<int32_t>(out_rows_total));
      return;
    }
    float v = acc[0][j][i];
    if (d.down_bias) v += d.down_bias[o];
    if (d.out_scale != 1.0f) v *= d.out_scale;
    out[row * s.n_out + o] = v;
  });
}

}  // namespace

void launch_ffn_gather_quantize(GgmlType act, const float* x, int64_t x_rows, int64_t n_in,
                                const int32_t* entry_task, const FfnDesc* descs, int64_t entries,
                                int32_t* row_map, uint8_t* dst, DeviceError* err, cudaStream_t stream) {
  if (entries <= 0) return;
  launch_ffn_row_map(x_rows, entry_task, descs, entries, row_map, err, stream);
  launch_quantize(act, x, n_in, row_map, entries, n_in, dst, stream);
}

void launch_ffn_row_map(int64_t x_rows, const int32_t* entry_task, const FfnDesc* descs, int64_t entries,
                        int32_t* row_map, DeviceError* err, cudaStream_t stream) {
  if (entries <= 0) return;
  launch_kernel(ffn_row_map_kernel, static_cast<unsigned>((entries + 127) / 128), 128, 0, stream, entry_task,
                descs, entries, x_rows, row_map, err);
  check_launch("ffn row map kernel");
}

void launch_ffn_gate_up(const FfnShape& s, const FfnDesc* descs, const FfnItem* items, int64_t n_items,
                        const uint8_t* qg, size_t qg_stride, const uint8_t* qu, size_t qu_stride, float* h,
                        float* u_scratch, int64_t, const float* x_raw, const int32_t* row_map,
                        cudaStream_t stream) {
  if (n_items <= 0 || s.n_ff <= 0) return;
  if (s.max_cols > 8) {
    const dim3 grid(static_cast<unsigned>((s.n_ff + kMmaRowsPerBlock - 1) / kMmaRowsPerBlock),
                    static_cast<unsigned>(n_items));
    with_mma_weight(s.gate_type, [&]<class W>() {
      launch_kernel(ffn_gate_up_mma_kernel<W>, grid, kMmaWarps * kWarp, 0, stream, s, descs, items, qg,
                    qg_stride, h);
    });
    check_launch("ffn gate/up kernel (mma)");
    return;
  }
  const dim3 grid = matvec_grid(s.n_ff, kWarpsPerBlock, n_items);
  const unsigned threads = kWarpsPerBlock * kWarp;
  const size_t quant_smem =
      x_raw ? act_row_stride(GgmlType::Q8_0, s.n_in) * static_cast<size_t>(s.max_cols) : 0;
  // The column tile covers the largest item (smaller items skip the extra columns at run time); a decode
  // step's items all have one row and get the lean 1-column kernel, in blocks of quantizing_decode_warps
  // where it quantizes its input (each block quantizes the whole input row).
  with_col_tile(col_tile(s.max_cols), [&]<int NC>() {
    if (s.gate_type == s.up_type) {
      with_weight_traits(s.gate_type, [&]<class T>() {
        constexpr int kQuantWarps = NC == 1 ? quantizing_decode_warps<T, 2 * kRowsPerWarp>() : kWarpsPerBlock;
        if (x_raw)
          launch_kernel(ffn_gate_up_kernel<T, NC, 0, true, false, kQuantWarps>,
                        matvec_grid(s.n_ff, kQuantWarps, n_items), kQuantWarps * kWarp, quant_smem, stream, s,
                        descs, items, qg, qg_stride, qu, qu_stride, h, nullptr, x_raw, row_map,
                        RoutedSource{});
        else
          launch_kernel(ffn_gate_up_kernel<T, NC, 0, false, false>, grid, threads, 0, stream, s, descs, items,
                        qg, qg_stride, qu, qu_stride, h, nullptr, nullptr, nullptr, RoutedSource{});
      });
    } else {
      with_weight_traits(s.up_type, [&]<class T>() {
        launch_kernel(ffn_gate_up_kernel<T, NC, 2, false, false>, grid, threads, 0, stream, s, descs, items,
                      qg, qg_stride, qu, qu_stride, h, u_scratch, nullptr, nullptr, RoutedSource{});
      });
      check_launch("ffn up kernel");
      with_weight_traits(s.gate_type, [&]<class T>() {
        launch_kernel(ffn_gate_up_kernel<T, NC, 1, false, false>, grid, threads, 0, stream, s, descs, items,
                      qg, qg_stride, qu, qu_stride, h, u_scratch, nullptr, nullptr, RoutedSource{});
      });
    }
  });
  check_launch("ffn gate/up kernel");
}

void launch_ffn_down(const FfnShape& s, const FfnDesc* descs, const FfnItem* items, int64_t n_items,
                     const uint8_t* qh, size_t qh_stride, float* out, int64_t out_rows_total,
                     DeviceError* err, const float* h_raw, cudaStream_t stream) {
  if (n_items <= 0 || s.n_out <= 0) return;
  if (s.max_cols > 8) {
    const dim3 grid(static_cast<unsigned>((s.n_out + kMmaRowsPerBlock - 1) / kMmaRowsPerBlock),
                    static_cast<unsigned>(n_items));
    with_mma_weight(s.down_type, [&]<class W>() {
      launch_kernel(ffn_down_mma_kernel<W>, grid, kMmaWarps * kWarp, 0, stream, s, descs, items, qh,
                    qh_stride, out, out_rows_total, err);
    });
    check_launch("ffn down kernel (mma)");
    return;
  }
  const dim3 grid = matvec_grid(s.n_out, kWarpsPerBlock, n_items);
  const size_t quant_smem =
      h_raw ? act_row_stride(GgmlType::Q8_0, s.n_ff) * static_cast<size_t>(s.max_cols) : 0;
  with_col_tile(col_tile(s.max_cols), [&]<int NC>() {
    with_weight_traits(s.down_type, [&]<class T>() {
      // As the gate/up launch above: a one-row decode item that quantizes takes quantizing_decode_warps.
      constexpr int kQuantWarps = NC == 1 ? quantizing_decode_warps<T, kRowsPerWarp>() : kWarpsPerBlock;
      if (h_raw)
        launch_kernel(ffn_down_kernel<T, NC, true, false, kQuantWarps>,
                      matvec_grid(s.n_out, kQuantWarps, n_items), kQuantWarps * kWarp, quant_smem, stream, s,
                      descs, items, qh, qh_stride, out, out_rows_total, err, h_raw, RoutedSource{});
      else
        with_act_staging<T, NC>(s.n_ff, [&]<bool kStage>(size_t smem) {
          launch_kernel(ffn_down_kernel<T, NC, false, false, kWarpsPerBlock, kStage>, grid,
                        kWarpsPerBlock * kWarp, smem, stream, s, descs, items, qh, qh_stride, out,
                        out_rows_total, err, nullptr, RoutedSource{});
        });
    });
  });
  check_launch("ffn down kernel");
}

void launch_routed_tables(const ExpertStacks& st, const int32_t* ids, int64_t entries, int k, FfnDesc* descs,
                          FfnItem* items, int32_t* entry_task, int32_t* row_map, int32_t* rows,
                          DeviceError* err, cudaStream_t stream) {
  if (entries <= 0) return;
  const int threads = 128;
  launch_kernel(routed_tables_kernel, static_cast<unsigned>((entries + threads - 1) / threads), threads, 0,
                stream, st, ids, entries, k, descs, items, entry_task, row_map, rows, err);
}

bool routed_ffn_direct(const FfnShape& s, const float* x) {
  return s.gate_type == s.up_type && in_kernel_quantize(s.gate_type, x, s.n_in, s.n_in, 1) &&
         in_kernel_quantize_shape(s.down_type, s.n_ff, s.n_ff, 1);
}

namespace {

void launch_routed_gate_up(const FfnShape& s, const RoutedSource& rs, int64_t entries, const float* x,
                           float* h, cudaStream_t stream) {
  with_weight_traits(s.gate_type, [&]<class T>() {
    constexpr int kWarps = quantizing_decode_warps<T, 2 * kRowsPerWarp>();  // gate and up rows
    launch_kernel(ffn_gate_up_kernel<T, 1, 0, true, true, kWarps>, matvec_grid(s.n_ff, kWarps, entries),
                  kWarps * kWarp, act_row_stride(GgmlType::Q8_0, s.n_in), stream, s, nullptr, nullptr,
                  nullptr, 0, nullptr, 0, h, nullptr, x, nullptr, rs);
  });
  check_launch("routed ffn gate/up kernel");
}

// The types the routed kernels take (routed_ffn_direct's), as traits.
template <class F>
bool with_routed_traits(GgmlType t, F&& f) {
  return with_traits_among<TQ4_0, TQ8_0, TMXFP4>(t, std::forward<F>(f));
}

template <class F>
bool with_combine_k(int k, F&& f) {
  switch (k) {
    case 2:
      f.template operator()<2>();
      return true;
    case 4:
      f.template operator()<4>();
      return true;
    case 6:
      f.template operator()<6>();
      return true;
    case 8:
      f.template operator()<8>();
      return true;
    default:
      return false;
  }
}

size_t combine_smem_bytes(const FfnShape& s, int k) {
  size_t slot = 0;
  with_routed_traits(s.down_type, [&]<class T>() { slot = smem_slot<T>(); });
  return static_cast<size_t>(combine_warps(k)) * static_cast<size_t>(k) * slot +
         static_cast<size_t>(k) * act_row_stride(GgmlType::Q8_0, s.n_ff);
}

}  // namespace

void launch_routed_ffn(const FfnShape& s, const RoutedSource& rs, int64_t entries, const float* x, float* h,
                       float* out, cudaStream_t stream) {
  if (entries <= 0 || s.n_ff <= 0 || s.n_out <= 0) return;
  launch_routed_gate_up(s, rs, entries, x, h, stream);
  const dim3 grid_down = matvec_grid(s.n_out, kWarpsPerBlock, entries);
  with_weight_traits(s.down_type, [&]<class T>() {
    launch_kernel(ffn_down_kernel<T, 1, true, true>, grid_down, kWarpsPerBlock * kWarp,
                  act_row_stride(GgmlType::Q8_0, s.n_ff), stream, s, nullptr, nullptr, nullptr, 0, out,
                  entries, rs.err, h, rs);
  });
  check_launch("routed ffn down kernel");
}

bool routed_ffn_combines(const FfnShape& s, const float* x, int k) {
  if (!routed_ffn_direct(s, x) || !with_combine_k(k, [&]<int>() {})) return false;
  // Asked once: a decode step calls this per MoE layer, graph replays too (the GPUs one process drives
  // are of one kind).
  static const int smem_limit = [] {
    int device = 0, limit = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "cudaDeviceGetAttribute (shared memory per block)");
    return limit;
  }();
  size_t gate_up_smem = 0;
  with_routed_traits(s.gate_type, [&]<class T>() { gate_up_smem = routed_gate_up_q8_smem<T>(s.n_in); });
  return s.n_ff % kQhGroup == 0 && combine_smem_bytes(s, k) <= static_cast<size_t>(smem_limit) &&
         gate_up_smem <= static_cast<size_t>(smem_limit);
}

void launch_routed_ffn_combine(const FfnShape& s, const RoutedSource& rs, int64_t T, const float* x,
                               const uint8_t* xq, uint8_t* qh, const float* weights, float* acc,
                               cudaStream_t stream) {
  if (T <= 0 || s.n_ff <= 0 || s.n_out <= 0) return;
  launch_routed_gate_up_q8(s, rs, T * rs.k, x, xq, qh, stream);
  launch_routed_down_combine(s, rs, T, qh, weights, acc, nullptr, stream);
}

void launch_routed_gate_up_q8(const FfnShape& s, const RoutedSource& rs, int64_t entries, const float* x,
                              const uint8_t* xq, uint8_t* qh, cudaStream_t stream) {
  if (entries <= 0 || s.n_ff <= 0) return;
  const dim3 grid(static_cast<unsigned>(s.n_ff / kQhGroup), static_cast<unsigned>(entries));
  const bool launched = with_routed_traits(s.gate_type, [&]<class T>() {
    const auto launch = [&]<bool kPreQuantized>() {
      const auto kernel = routed_gate_up_q8_kernel<T, kPreQuantized>;
      const size_t smem = routed_gate_up_q8_smem<T>(s.n_in);
      check_cuda(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
          "cudaFuncSetAttribute (routed gate/up kernel)");
      launch_kernel(kernel, grid, kQhWarps * kWarp, smem, stream, s, x, xq, qh, rs);
    };
    if (xq)
      launch.template operator()<true>();
    else
      launch.template operator()<false>();
  });
  if (!launched)
    check_cuda(cudaErrorInvalidValue, "routed gate/up kernel (a weight type routed_ffn_combines refuses)");
  check_launch("routed ffn gate/up kernel (quantized h)");
}

void launch_routed_down_combine(const FfnShape& s, const RoutedSource& rs, int64_t T, const uint8_t* qh,
                                const float* weights, float* acc, const float* host_v, cudaStream_t stream) {
  if (T <= 0 || s.n_ff <= 0 || s.n_out <= 0) return;
  const size_t smem = combine_smem_bytes(s, rs.k);
  const int warps = combine_warps(rs.k);
  const dim3 grid(static_cast<unsigned>((s.n_out + warps - 1) / warps), static_cast<unsigned>(T));
  bool launched = false;
  with_routed_traits(s.down_type, [&]<class T>() {
    launched = with_combine_k(rs.k, [&]<int K>() {
      check_cuda(cudaFuncSetAttribute(ffn_down_combine_kernel<T, K>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                 "cudaFuncSetAttribute (routed down/combine kernel)");
      launch_kernel(ffn_down_combine_kernel<T, K>, grid, warps * kWarp, smem, stream, s, qh, weights, acc, rs,
                    host_v);
    });
  });
  if (!launched)
    check_cuda(cudaErrorInvalidValue,
               "routed down/combine kernel (a weight type or k routed_ffn_combines refuses)");
  check_launch("routed ffn down/combine kernel");
}

}  // namespace df::backend::cuda

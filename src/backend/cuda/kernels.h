#pragma once
// Launchers of the CUDA kernels (the .cu files of this folder), callable from plain C++: raw device pointers,
// sizes and the stream, no CUDA types beyond cudaStream_t and no fmt (nvcc cannot compile fmt's consteval
// format strings, so every message is built on the host side, in the .cpp files). Each launcher enqueues
// on `stream` and reports a launch failure through check_cuda.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"

#if defined(__CUDACC__)
#define DF_HD __host__ __device__
#else
#define DF_HD
#endif

namespace df::backend::cuda {

// Throws df::Error "<what>: <cudaGetErrorString>" unless err is cudaSuccess (cuda_backend.cpp).
void check_cuda(cudaError_t err, const char* what);
// check_cuda(cudaGetLastError(), what) after a launch.
void check_launch(const char* what);

// ---- A failure found by a kernel, recorded in mapped pinned memory and reported by the host after the
// next synchronisation (CudaBackend::check_error_word).
struct DeviceError {
  int32_t code;   // 0: none
  int32_t value;  // the offending value (a token id, a row index)
  int32_t limit;  // what it had to be below
};
enum DeviceErrorCode : int32_t {
  kErrNone = 0,
  kErrGetRowsId = 1,
  kErrFfnInRow = 2,
  kErrFfnOutRow = 3,
  kErrExpertId = 4
};

// ---- Activation rows in the backend's own quantized layout (not ggml's blocks: the same values, arranged
// so that the kernels load them with aligned vector loads): the quants of all n values first (int8 for the
// Q8 formats, the 16-bit values for F16/BF16, floats for F32), then the block scales as floats (the f16
// scale of Q8_0/Q8_1 converted exactly, Q8_K's f32 d), then Q8_1's s (floats) or Q8_K's 16-value sums
// (int16). Rows are act_row_stride bytes apart (a multiple of 16).
DF_HD inline size_t act_quants_bytes(GgmlType act, int64_t n) {
  switch (act) {
    case GgmlType::F32:
      return static_cast<size_t>(n) * 4;
    case GgmlType::F16:
    case GgmlType::BF16:
      return static_cast<size_t>(n) * 2;
    default:
      return static_cast<size_t>(n);
  }
}
DF_HD inline size_t act_row_stride(GgmlType act, int64_t n) {
  size_t b = act_quants_bytes(act, n);
  if (act == GgmlType::Q8_0) b += static_cast<size_t>(n / 32) * 4;
  if (act == GgmlType::Q8_1) b += static_cast<size_t>(n / 32) * 8;
  if (act == GgmlType::Q8_K) b += static_cast<size_t>(n / 256) * 4 + static_cast<size_t>(n / 16) * 2;
  return (b + 15) / 16 * 16;
}

// Quantizes rows of x (rows × n floats; row r at x + r * x_stride, or row rows_map[r] of x when rows_map is
// given) to the activation format act, row r at dst + r * act_row_stride(act, n). Byte-for-value identical
// to quant::quantize_activation.
// Small uploads as a kernel's parameters (kParamBytes at most): the bytes travel with the launch, not through
// a copy engine, so they do not queue behind the expert records' copies up on another stream (an upload on
// the same engine would wait for them, and the layer with it).
constexpr size_t kParamBytes = 1024;
struct ParamBytes {
  uint32_t n;
  uint8_t bytes[kParamBytes];
};
void launch_write_bytes(void* dst, const void* src, size_t n, cudaStream_t stream);
// dst[i] = src[i] for i < n: src may be mapped host memory (the SMs read it over the link, no copy engine).
void launch_copy_floats(float* dst, const float* src, int64_t n, cudaStream_t stream);
void launch_quantize(GgmlType act, const float* x, int64_t x_stride, const int32_t* rows_map, int64_t rows,
                     int64_t n, uint8_t* dst, cudaStream_t stream);

// Decode products (at most 8 activation rows) of weights whose activation format is Q8_0 quantize their input
// rows inside the kernel, without the quantize launch, when those rows take at most kInKernelQuantBytes of
// shared memory and each is 16-byte aligned (x and x_stride floats apart).
constexpr size_t kInKernelQuantBytes = 8192;
bool in_kernel_quantize(GgmlType w_type, const float* x, int64_t x_stride, int64_t n, int64_t cols);
// The same for rows not yet allocated that will start 16-byte aligned.
bool in_kernel_quantize_shape(GgmlType w_type, int64_t x_stride, int64_t n, int64_t cols);

// ---- Matrix products. y[c * y_stride + o] = W[o] · act row c, for o < n_out, c < cols (act rows act_stride
// apart, quantized by launch_quantize to the weight's activation format). With x_raw (in_kernel_quantize
// holds for it, rows n_in floats apart), the kernel quantizes those float rows itself and act is not read.
// The decode kernels start reading W before the previous kernel of the stream has finished
// (device_common.cuh, pdl_wait): W must be memory that no kernel writes (weights uploaded by copies).
void launch_matmul(GgmlType w_type, const uint8_t* w, size_t row_bytes, int64_t n_out, int64_t n_in,
                   const uint8_t* act, size_t act_stride, int64_t cols, float* y, int64_t y_stride,
                   const float* x_raw, cudaStream_t stream, bool accumulate = false);
// accumulate: y = y + W · act (the add op's addition) in place of y = W · act; only where decode_matvec
// holds. Whether a product of cols activation rows of w_type runs the decode matrix-vector kernels (up to
// kMatvecMaxRows rows of a non-F32 weight type): the products that accumulate and group.
bool decode_matvec(GgmlType w_type, int64_t cols);
// Up to kMatmulGroupMax decode products of one weight type and row length over the same activation rows in
// one launch (a layer's Q, K and V): y of part p = W_p · act, n_out_p floats a row; act, act_stride, cols and
// x_raw as launch_matmul's. Each part's values are those launch_matmul gives it (the same blocks). Only where
// decode_matvec holds; first_block is the launcher's to fill.
constexpr int kMatmulGroupMax = 4;
struct MatmulGroupPart {
  const uint8_t* w;
  size_t row_bytes;
  int64_t n_out;
  float* y;
};
struct MatmulGroup {
  int n;
  MatmulGroupPart part[kMatmulGroupMax];
  unsigned first_block[kMatmulGroupMax];
};
void launch_matmul_group(GgmlType w_type, MatmulGroup g, int64_t n_in, const uint8_t* act, size_t act_stride,
                         int64_t cols, const float* x_raw, cudaStream_t stream);

// ---- Grouped FFN (ffn.cu). One descriptor per FFN task; one work item per (task, up to 8 entries).
struct FfnDesc {
  const uint8_t* gate;
  const uint8_t* up;
  const uint8_t* down;
  const float* gate_bias;
  const float* up_bias;
  const float* down_bias;
  const int32_t* in_rows;   // null: entry index within the task
  const int32_t* out_rows;  // null: entry index within the task
  float out_scale;
  int32_t entry0;  // the task's first entry (gathered input row)
  int32_t n_rows;
};
struct FfnItem {
  int32_t task;
  int32_t local0;  // first row of the task
  int32_t cols;    // 1..8
};
enum class FfnAct : int32_t { SwiGLU = 0, GeGLU = 1, OaiSwiGLU = 2 };
// Products of up to this many activation rows run the matrix-vector kernels, which compute each row as a
// batch of one would; more rows (with a weight type mma_supported takes) run int8 tensor-core tiles, whose
// float sums come in another order (Backend::batch_invariant_rows).
constexpr int64_t kMatvecMaxRows = 8;
// Whether the int8 tensor-core kernels take this weight type (products of more than kMatvecMaxRows activation
// rows, and FFN work items of up to kFfnMmaCols rows).
bool mma_supported(GgmlType w_type);
constexpr int kFfnMmaCols = 32;

struct FfnShape {
  GgmlType gate_type, up_type, down_type;
  int64_t n_in, n_ff, n_out;
  size_t gate_row_bytes, up_row_bytes, down_row_bytes;
  FfnAct act;
  float alpha, limit;
  int max_cols;  // the most rows of any item (picks the kernels' column tile)
};
// Gathers the input rows of every entry (entry e of task t = entry_task[e] reads x row in_rows[e - entry0],
// or that index when the task has no in_rows; rows out of range are recorded in err and read as row 0) into
// row_map, then quantizes them to `act` at dst (act_row_stride apart).
void launch_ffn_gather_quantize(GgmlType act, const float* x, int64_t x_rows, int64_t n_in,
                                const int32_t* entry_task, const FfnDesc* descs, int64_t entries,
                                int32_t* row_map, uint8_t* dst, DeviceError* err, cudaStream_t stream);
// Only the row map of launch_ffn_gather_quantize, for kernels that quantize their input themselves.
void launch_ffn_row_map(int64_t x_rows, const int32_t* entry_task, const FfnDesc* descs, int64_t entries,
                        int32_t* row_map, DeviceError* err, cudaStream_t stream);
// h[entry][o] = act(gate · qg + gate_bias, up · qu + up_bias) for o < n_ff (qu may equal qg). When gate
// and up differ in type, u_scratch (entries × n_ff floats) holds up's products between two launches. With
// x_raw (gate and up share a type, at most 8 rows an item, in_kernel_quantize holds for x_raw, n_in and
// max_cols), each block quantizes its entries' rows x_raw + row_map[entry] * n_in itself; qg is not read.
void launch_ffn_gate_up(const FfnShape& s, const FfnDesc* descs, const FfnItem* items, int64_t n_items,
                        const uint8_t* qg, size_t qg_stride, const uint8_t* qu, size_t qu_stride, float* h,
                        float* u_scratch, int64_t entries, const float* x_raw, const int32_t* row_map,
                        cudaStream_t stream);
// out[out_row][o] = (down · qh[entry] + down_bias) · out_scale. With h_raw (at most 8 rows an item,
// in_kernel_quantize holds for h_raw, n_ff and max_cols), each block quantizes its entries' rows of h_raw
// (n_ff floats apart) itself; qh is not read.
void launch_ffn_down(const FfnShape& s, const FfnDesc* descs, const FfnItem* items, int64_t n_items,
                     const uint8_t* qh, size_t qh_stride, float* out, int64_t out_rows_total,
                     DeviceError* err, const float* h_raw, cudaStream_t stream);

// routed_ffn's tables, built on the device from the routing ids (no host round trip): entry i = t · k + j is
// task i, one row (x row t, out row i) of expert ids[i], whose matrices are the stacks' ids[i]-th and whose
// biases are the tables' ids[i]-th rows (null tables: none) and whose out_scale is down_scale[ids[i]] (null:
// 1); row_map[i] = t, the row map that launch_ffn_gather_quantize would build. Ids out of range are recorded
// and read as 0.
struct ExpertStacks {
  const uint8_t *gate, *up, *down;
  size_t gate_stride, up_stride, down_stride;
  const float *gate_bias, *up_bias, *down_bias;
  const float* down_scale;  // null: none; else expert e's out_scale is down_scale[e]
  const int32_t*
      slot_of;  // null: expert e is matrix e of each stack; else matrix slot_of[e] (< 0: the host's)
  int n_expert;
  int64_t n_ff, n_out;
};
void launch_routed_tables(const ExpertStacks& st, const int32_t* ids, int64_t entries, int k, FfnDesc* descs,
                          FfnItem* items, int32_t* entry_task, int32_t* row_map, int32_t* rows,
                          DeviceError* err, cudaStream_t stream);
// The same routed entries without the tables: the gate/up and down kernels read each entry's expert from
// the ids themselves (one launch fewer). Only where routed_ffn_direct holds: gate and up of one type, both
// products quantizing their input in the kernel. h: entries x n_ff floats between the two launches, 16-byte
// aligned; out: entries x n_out.
struct RoutedSource {
  ExpertStacks st;
  const int32_t* ids;
  int k;
  DeviceError* err;
};
bool routed_ffn_direct(const FfnShape& s, const float* x);
void launch_routed_ffn(const FfnShape& s, const RoutedSource& rs, int64_t entries, const float* x, float* h,
                       float* out, cudaStream_t stream);
// The same with the MoE combine in the down product (CudaBackend::routed_ffn_add): for each of the T tokens,
// acc[t] += Σ_j weights[t·k + j] · entry t·k + j's down output (bias, scale), each entry's value formed as
// the down kernel forms it and the sum as launch_moe_combine_add does; the entries' rows are not written.
// Only where routed_ffn_combines holds: routed_ffn_direct, k one of 2, 4, 6, 8, n_ff a multiple of 32 and
// both kernels' shared memory within the device's. qh: the entries' activations h as Q8_0 rows (T·k rows
// act_row_stride(Q8_0, n_ff) apart), which the gate/up kernel writes and the down/combine kernel reads.
// xq: null, or x's T rows already as Q8_0 rows (act_row_stride(Q8_0, n_in) apart; the bytes launch_quantize
// makes of them), which the gate/up kernel then reads instead of quantizing x.
bool routed_ffn_combines(const FfnShape& s, const float* x, int k);
void launch_routed_ffn_combine(const FfnShape& s, const RoutedSource& rs, int64_t T, const float* x,
                               const uint8_t* xq, uint8_t* qh, const float* weights, float* acc,
                               cudaStream_t stream);
// Its two launches apart, for a call whose host computes some experts meanwhile (CudaBackend::routed_ffn_add
// with RoutedExperts::host): the gate/up products of the entries whose slot is not negative, then the down
// product with the combine, in which an entry of a negative slot takes its down sums from host_v (entries x
// n_out floats on the device; null when no slot is negative).
void launch_routed_gate_up_q8(const FfnShape& s, const RoutedSource& rs, int64_t entries, const float* x,
                              const uint8_t* xq, uint8_t* qh, cudaStream_t stream);
void launch_routed_down_combine(const FfnShape& s, const RoutedSource& rs, int64_t T, const uint8_t* qh,
                                const float* weights, float* acc, const float* host_v, cudaStream_t stream);

// ---- Expert records: n_out Q4_0 rows (n_out a multiple of 16) from Q4_0x16 groups (quant/q4_0x16.h), the
// bytes the host's quant::unpack_q4_0x16 writes. `packed` 4-byte aligned, `rows` 2-byte aligned.
void launch_unpack_q4_0x16(const uint8_t* packed, int64_t n_out, int64_t n_in, uint8_t* rows,
                           cudaStream_t stream);

// ---- get_rows: out[i] = dequantized row ids[i] of the table (ids checked against n_rows).
void launch_get_rows(GgmlType type, const uint8_t* table, size_t row_bytes, int64_t n_rows, int64_t n_in,
                     const int32_t* ids, int64_t n, float* out, DeviceError* err, cudaStream_t stream);

// ---- Norm and RoPE (norm_rope.cu).
void launch_rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y,
                     cudaStream_t stream);
// The same norm of rows of kNormWarpMax < n <= 4,096 values (n a multiple of 32, y 16-byte aligned), each row
// then also quantized to Q8_0 at q (act_row_stride(Q8_0, n) apart), value for value what a decode product
// quantizing its input in the kernel makes of y: the producer quantizes a row once, where each block of the
// products reading it would read the floats and quantize them after its wait (docs/PERF.md, session 30: the
// products' own quantization is 18 % of a decode step, 13 points of it that read).
bool rms_norm_q8_shape(int64_t n);
void launch_rms_norm_q8(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y,
                        uint8_t* q, cudaStream_t stream);
struct RopeArgs {
  int n_rot, neox;
  float theta_scale, freq_scale, ext_factor, attn_factor, corr_lo, corr_hi, yarn_mag;
  const float* freq_factors;
};
void launch_rope(float* x, int64_t rows, int n_head, int head_dim, const int32_t* pos, const RopeArgs& a,
                 cudaStream_t stream);
// The per-head rms_norm (launch_rms_norm's bits) then RoPE (launch_rope's) of up to kNormRopeTasks tensors in
// place, in one launch; only where norm_rope_shape holds (heads of up to kNormWarpMax values).
constexpr int kNormRopeTasks = 2;
struct NormRopeArgs {
  struct Task {
    float* x;
    const float* weight;  // null: no weight
    int n_head;
  } task[kNormRopeTasks];
  int n_tasks, head_dim;
  float eps;
};
bool norm_rope_shape(int head_dim, int n_rot, int n_tasks);
void launch_norm_rope(const NormRopeArgs& na, int64_t rows, const int32_t* pos, const RopeArgs& a,
                      cudaStream_t stream);

// ---- KV cache and attention (attention.cu). The first position is pos0, or *pos0_device when that is given
// (a step graph's position word, step_graph.h).
void launch_kv_store(uint16_t* k_cache, uint16_t* v_cache, int n_ctx, int64_t row, const float* k,
                     const float* v, int64_t rows, int pos0, const int32_t* pos0_device, cudaStream_t stream);
struct AttnArgs {
  int n_head, n_head_kv, head_dim, n_ctx, window;
  float scale, softcap;
  const float* sinks;
};
// scores: rows × n_head × n_ctx floats of scratch.
// q8 (null: none; only where attention_quantizes holds): out's rows also as Q8_0 rows (act_row_stride(Q8_0,
// n_head · head_dim) apart), the bytes launch_quantize makes of them.
bool attention_quantizes(int64_t rows, int head_dim);
void launch_attention(const uint16_t* k_cache, const uint16_t* v_cache, const float* q, int64_t rows,
                      int pos0, const int32_t* pos0_device, const AttnArgs& a, float* out, float* scores,
                      uint8_t* q8, cudaStream_t stream);

// ---- Routing (routing.cu).
struct RouteArgs {
  int gating;  // Gating
  int n_expert, k;
  const float* selection_bias;
  int normalize;
  float scale;
};
void launch_route(const RouteArgs& a, const float* logits, int64_t rows, int32_t* ids, float* weights,
                  cudaStream_t stream);
// norm_route as one launch (routing.cu): for up to kNormRouteMaxRows rows of n values (n a multiple of 4, at
// most 4096) with an F32 router, where the rows and the route's scratch fit kNormRouteMaxSmem bytes of
// shared memory (norm_route_fused). counter: a zeroed word of device memory, left zeroed.
constexpr int kNormRouteMaxRows = 8;
constexpr size_t kNormRouteMaxSmem = 48 << 10;
struct NormRouteArgs {
  const float* x;
  int64_t rows, n;
  const float* norm;
  float eps;
  const float* router;  // n_expert rows of n floats
  float* xn;
  float* logits;
  int32_t* ids;
  float* weights;
  RouteArgs route;
  unsigned* counter;
  // Null, or (only where norm_route_quantizes holds) xn also written here as a Q8_0 row (act_row_stride
  // bytes), the bytes launch_quantize makes of it: the routed gate/up that reads xn next takes it from here.
  uint8_t* xq;
};
bool norm_route_fused(int64_t rows, int64_t n, int n_expert, int k);
// Whether launch_norm_route writes NormRouteArgs::xq for these arguments (one row routed by one cluster).
bool norm_route_quantizes(int64_t rows, int64_t n, int n_expert);
void launch_norm_route(const NormRouteArgs& a, cudaStream_t stream);
void launch_moe_combine_add(const float* expert_out, const float* weights, int64_t rows, int k, int64_t n,
                            float* x, cudaStream_t stream);

// ---- LFM2 short convolution (short_conv.cu).
// q (null: none; only where short_conv_quantizes holds): y's rows also as Q8_0 rows (act_row_stride apart),
// the bytes launch_quantize makes of them.
bool short_conv_quantizes(int64_t rows, int64_t n);
void launch_short_conv(const float* bcx, int64_t rows, int64_t n, const float* conv_w, int l_cache,
                       float* state, float* y, uint8_t* q, cudaStream_t stream);

// ---- qwen35moe's gated delta-net (delta_net.cu): Backend::delta_net_conv, gated_delta_net and mul_sigmoid.
void launch_delta_net_conv(const float* u, int64_t rows, int64_t channels, const float* conv_w, int taps,
                           float* state, float* y, cudaStream_t stream);
struct DeltaNetArgs {
  int n_k, n_v, head_dim;  // head_dim at most 512
  float eps;
  float out_scale;  // 1 / sqrt(head_dim) as the host computed it
  const float *dt_bias, *ssm_a;
};
void launch_gated_delta_net(const DeltaNetArgs& a, const float* qkv, const float* alpha, const float* beta,
                            int64_t rows, float* state, float* out, cudaStream_t stream);
void launch_mul_sigmoid(float* x, const float* gate, int64_t rows, int64_t n, int64_t gate_n,
                        cudaStream_t stream);

// ---- Elementwise (elementwise.cu).
void launch_swiglu(const float* gate, const float* up, int64_t n, float* y, cudaStream_t stream);
void launch_add(float* x, const float* y, int64_t n, cudaStream_t stream);
void launch_add_bias_rows(float* x, const float* bias, int64_t rows, int64_t n, cudaStream_t stream);
void launch_scale(float* x, int64_t n, float s, cudaStream_t stream);
// ids[r] = util/argmax.h's first_argmax of row r of x (rows of n floats) (argmax.cu).
void launch_argmax(const float* x, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream);
void launch_mul_rows(float* x, const float* w, int64_t rows, int64_t n, cudaStream_t stream);
// x[i] = tanhf(x[i] * r) * cap, r = 1.0f / cap as the host computed it.
void launch_softcap(float* x, int64_t n, float r, float cap, cudaStream_t stream);

}  // namespace df::backend::cuda

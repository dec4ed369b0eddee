// matmul, one launch per product. Up to 8 activation rows (decode): one warp per kRowsPerWarp output rows
// (F32 weights: a block per row), grid (output rows / 8, activation rows / NC), each weight byte read from
// HBM once. More rows with Q4_0 / Q8_0 weights: int8 tensor-core tiles (mma_tile.cuh); other types walk tiles
// of 8 activation rows in the grid's y dimension, each re-reading the weight (from L2 when it fits).
#include "backend/cuda/f32_dot.cuh"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/mma_tile.cuh"
#include "backend/cuda/q8_block.cuh"

namespace df::backend::cuda {
namespace {

// One block of a decode product: kWarps warps, kRowsPerWarp output rows each, from row block_x * kWarps *
// kRowsPerWarp. The weights are read before the block waits for its predecessor (pdl_begin in rows_dot's
// prologue): the first chunk of every row is on its way while the previous kernel finishes and while this one
// quantizes its input. So `w` must be memory no kernel writes (uploaded weights; every matmul weight is one).
template <class T, int NC, bool kQuantize, int kWarps, bool kStage = false>
__device__ __forceinline__ void matmul_block(int64_t block_x, const uint8_t* w, size_t row_bytes,
                                             int64_t n_out, int64_t n_in, const uint8_t* act,
                                             size_t act_stride, int64_t cols, float* y, int64_t y_stride,
                                             const float* x_raw, bool accumulate) {
  __shared__ __align__(16) uint8_t smem[kWarps][kRowsPerWarp * smem_slot<T>()];
  extern __shared__ __align__(16) uint8_t act_smem[];  // kQuantize, kStage: this tile's quantized input rows
  static_assert(!kStage || (!kQuantize && stages_act(T::kType, NC)), "a staged input is one Q8_0 row");
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t o0 = (block_x * kWarps + warp) * kRowsPerWarp;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * NC;
  const int nc = static_cast<int>(cols - c0 < NC ? cols - c0 : NC);
  const uint8_t* tile_act = act + c0 * act_stride;
  const uint8_t* global_act = tile_act;
  if constexpr (kQuantize || kStage) {
    act_stride = act_row_stride(GgmlType::Q8_0, n_in);
    tile_act = act_smem;
  }
  // A warp past the last row reads the last row (and writes nothing): the prologue's block
  // synchronisation needs every warp.
  const uint8_t* rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) rows[r] = w + (o0 + r < n_out ? o0 + r : n_out - 1) * row_bytes;
  typename T::Acc acc[kRowsPerWarp][NC];
  rows_dot<T, NC, kRowsPerWarp>(rows, n_in, tile_act, act_stride, nc, smem[warp], acc, [&] {
    pdl_begin();
    if constexpr (kQuantize) {
      block_quantize_q8_0([&](int c) { return x_raw + (c0 + c) * n_in; }, nc, n_in, act_smem, act_stride);
      __syncthreads();
    }
    if constexpr (kStage) stage_act_row(global_act, n_in, act_smem);
  });
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int c = 0; c < NC; ++c)
        if (c < nc && o0 + r < n_out) {
          float* out = y + (c0 + c) * y_stride + o0 + r;
          const float v = static_cast<float>(acc[r][c]);
          *out = accumulate ? *out + v : v;  // accumulate: the add op's float addition
        }
}

// Warps per block of a decode product whose kernel quantizes its input: quantizing_decode_warps for one
// row, else kWarpsPerBlock. launch_matmul and launch_matmul_group both take it, so that a group's blocks are
// those of the products' own launches.
template <class T, int NC>
constexpr int quantizing_matmul_warps() {
  return NC == 1 ? quantizing_decode_warps<T, kRowsPerWarp>() : kWarpsPerBlock;
}

template <class T, int NC, bool kQuantize, int kWarps = kWarpsPerBlock, bool kStage = false>
__global__ void __launch_bounds__(kWarps* kWarp)
    matmul_kernel(const uint8_t* w, size_t row_bytes, int64_t n_out, int64_t n_in, const uint8_t* act,
                  size_t act_stride, int64_t cols, float* y, int64_t y_stride, const float* x_raw,
                  bool accumulate) {
  matmul_block<T, NC, kQuantize, kWarps, kStage>(blockIdx.x, w, row_bytes, n_out, n_in, act, act_stride, cols,
                                                 y, y_stride, x_raw, accumulate);
}

// Several products over the same activation rows in one launch (launch_matmul_group): the blocks of part p
// are first_block[p] .. first_block[p + 1] - 1, each computing what matmul_kernel's block of that index
// would, so every product has the bits of its own launch.
template <class T, int NC, bool kQuantize, int kWarps = kWarpsPerBlock, bool kStage = false>
__global__ void __launch_bounds__(kWarps* kWarp)
    matmul_group_kernel(MatmulGroup g, int64_t n_in, const uint8_t* act, size_t act_stride, int64_t cols,
                        const float* x_raw) {
  int p = 0;
#pragma unroll
  for (int i = 1; i < kMatmulGroupMax; ++i)
    if (i < g.n && blockIdx.x >= g.first_block[i]) p = i;
  const MatmulGroupPart& part = g.part[p];
  matmul_block<T, NC, kQuantize, kWarps, kStage>(blockIdx.x - g.first_block[p], part.w, part.row_bytes,
                                                 part.n_out, n_in, act, act_stride, cols, part.y, part.n_out,
                                                 x_raw, false);
}

// F32 weights (routers: a few dozen rows of a few thousand values, too few rows to occupy the GPU one warp
// per row): a block per output row, each thread a strided share of the row's 4-value units with the float
// products summed in double, then the threads' sums added as a fixed tree.
constexpr int kF32Threads = 256, kF32Prefetch = 2;
template <int NC>
__global__ void __launch_bounds__(kF32Threads)
    matmul_f32_kernel(const float* w, size_t row_floats, int64_t n_in, const uint8_t* act, size_t act_stride,
                      int64_t cols, float* y, int64_t y_stride) {
  const int64_t o = blockIdx.x;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * NC;
  const int nc = static_cast<int>(cols - c0 < NC ? cols - c0 : NC);
  const float4* wr = reinterpret_cast<const float4*>(w + o * row_floats);
  const auto early = f32_load_early<kF32Threads, kF32Prefetch>(wr, n_in / 4);
  pdl_begin();
  double acc[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) acc[c] = 0.0;
  f32_rows_dot(
      wr, n_in / 4, early, nc,
      [&](int c) { return reinterpret_cast<const float4*>(act + (c0 + c) * act_stride); }, acc);
  f32_block_sums<kF32Threads>(acc, nc,
                              [&](int c, double t) { y[(c0 + c) * y_stride + o] = static_cast<float>(t); });
}

// The same sums for many activation rows (a prompt's routers): a block takes kF32Outputs weight rows, so
// that each activation row is read by n_out / kF32Outputs blocks instead of n_out (the per-row kernel was
// bound by those reads: 36 us for a 64-expert router over 512 rows).
constexpr int kF32Outputs = 4;
template <int NC>
__global__ void __launch_bounds__(kF32Threads)
    matmul_f32_rows_kernel(const float* w, size_t row_floats, int64_t n_out, int64_t n_in, const uint8_t* act,
                           size_t act_stride, int64_t cols, float* y, int64_t y_stride) {
  pdl_begin();
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kF32Outputs;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * NC;
  const int nc = static_cast<int>(cols - c0 < NC ? cols - c0 : NC);
  double acc[kF32Outputs * NC];
#pragma unroll
  for (int i = 0; i < kF32Outputs * NC; ++i) acc[i] = 0.0;
  f32_multi_rows_dot<kF32Threads, kF32Outputs, NC>(
      [&](int o) { return reinterpret_cast<const float4*>(w + min(o0 + o, n_out - 1) * row_floats); },
      n_in / 4, nc, [&](int c) { return reinterpret_cast<const float4*>(act + (c0 + c) * act_stride); }, acc);
  f32_block_sums<kF32Threads>(acc, kF32Outputs * NC, [&](int i, double t) {
    const int64_t o = o0 + i / NC;
    const int c = i % NC;
    if (o < n_out && c < nc) y[(c0 + c) * y_stride + o] = static_cast<float>(t);
  });
}

// More than 8 activation rows with Q4_0 / Q8_0 weights: int8 tensor-core tiles (mma_tile.cuh), a block of
// 64 weight rows × kMmaCols activation rows.
template <class W>
__global__ void __launch_bounds__(kMmaWarps* kWarp)
    matmul_mma_kernel(const uint8_t* w, size_t row_bytes, int64_t n_out, int64_t n_in, const uint8_t* act,
                      size_t act_stride, int64_t cols, float* y, int64_t y_stride) {
  pdl_begin();
  const int warp = threadIdx.x / kWarp;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * kMmaRowsPerBlock + warp * 16;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kMmaCols;
  const int nc = static_cast<int>(cols - c0 < kMmaCols ? cols - c0 : kMmaCols);
  float acc[1][kMmaCols / 8][4];
  const uint8_t* const ws[1] = {w};
  const size_t rbs[1] = {row_bytes};
  mma_rows<W, kMmaCols, 1>(ws, rbs, n_out, o0, n_in, act + c0 * act_stride, act_stride, nc, acc);
  for_each_fragment(o0, [&](int64_t o, int c, int j, int i) {
    if (o < n_out && c < nc) y[(c0 + c) * y_stride + o] = acc[0][j][i];
  });
}

}  // namespace

bool mma_supported(GgmlType w_type) { return w_type == GgmlType::Q4_0 || w_type == GgmlType::Q8_0; }

bool in_kernel_quantize_shape(GgmlType w_type, int64_t x_stride, int64_t n, int64_t cols) {
  return quantizes_in_kernel(w_type) && cols >= 1 && cols <= 8 && n % 32 == 0 && x_stride % 4 == 0 &&
         act_row_stride(GgmlType::Q8_0, n) * static_cast<size_t>(col_tile(cols)) <= kInKernelQuantBytes;
}

bool in_kernel_quantize(GgmlType w_type, const float* x, int64_t x_stride, int64_t n, int64_t cols) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && in_kernel_quantize_shape(w_type, x_stride, n, cols);
}

bool decode_matvec(GgmlType w_type, int64_t cols) {
  return cols >= 1 && cols <= kMatvecMaxRows && w_type != GgmlType::F32 &&
         with_weight_traits(w_type, [&]<class T>() {});
}

void launch_matmul(GgmlType w_type, const uint8_t* w, size_t row_bytes, int64_t n_out, int64_t n_in,
                   const uint8_t* act, size_t act_stride, int64_t cols, float* y, int64_t y_stride,
                   const float* x_raw, cudaStream_t stream, bool accumulate) {
  if (accumulate && !decode_matvec(w_type, cols)) {
    check_cuda(cudaErrorInvalidValue, "matmul kernel (accumulation where decode_matvec refuses it)");
  }
  if (n_out <= 0 || cols <= 0) return;
  const int nc = col_tile(cols);
  if (w_type == GgmlType::F32 && cols > kMatvecMaxRows) {
    const dim3 grid(static_cast<unsigned>((n_out + kF32Outputs - 1) / kF32Outputs),
                    static_cast<unsigned>((cols + nc - 1) / nc));
    with_col_tile(nc, [&]<int NC>() {
      launch_kernel(matmul_f32_rows_kernel<NC>, grid, kF32Threads, 0, stream,
                    reinterpret_cast<const float*>(w), row_bytes / sizeof(float), n_out, n_in, act,
                    act_stride, cols, y, y_stride);
    });
    check_launch("matmul kernel (f32, many rows)");
    return;
  }
  if (w_type == GgmlType::F32) {
    const dim3 grid(static_cast<unsigned>(n_out), static_cast<unsigned>((cols + nc - 1) / nc));
    with_col_tile(nc, [&]<int NC>() {
      launch_kernel(matmul_f32_kernel<NC>, grid, kF32Threads, 0, stream, reinterpret_cast<const float*>(w),
                    row_bytes / sizeof(float), n_in, act, act_stride, cols, y, y_stride);
    });
    check_launch("matmul kernel (f32)");
    return;
  }
  if (cols > kMatvecMaxRows && mma_supported(w_type)) {
    const dim3 grid(static_cast<unsigned>((n_out + kMmaRowsPerBlock - 1) / kMmaRowsPerBlock),
                    static_cast<unsigned>((cols + kMmaCols - 1) / kMmaCols));
    with_mma_weight(w_type, [&]<class W>() {
      launch_kernel(matmul_mma_kernel<W>, grid, kMmaWarps * kWarp, 0, stream, w, row_bytes, n_out, n_in, act,
                    act_stride, cols, y, y_stride);
    });
    check_launch("matmul kernel (mma)");
    return;
  }
  const dim3 grid = matvec_grid(n_out, kWarpsPerBlock, (cols + nc - 1) / nc);
  const size_t quant_smem = x_raw ? act_row_stride(GgmlType::Q8_0, n_in) * static_cast<size_t>(nc) : 0;
  with_weight_traits(w_type, [&]<class T>() {
    with_col_tile(nc, [&]<int NC>() {
      constexpr int kQuantWarps = quantizing_matmul_warps<T, NC>();
      if (x_raw)
        launch_kernel(matmul_kernel<T, NC, true, kQuantWarps>,
                      matvec_grid(n_out, kQuantWarps, (cols + nc - 1) / nc), kQuantWarps * kWarp, quant_smem,
                      stream, w, row_bytes, n_out, n_in, act, act_stride, cols, y, y_stride, x_raw,
                      accumulate);
      else
        with_act_staging<T, NC>(n_in, [&]<bool kStage>(size_t smem) {
          launch_kernel(matmul_kernel<T, NC, false, kWarpsPerBlock, kStage>, grid, kWarpsPerBlock * kWarp,
                        smem, stream, w, row_bytes, n_out, n_in, act, act_stride, cols, y, y_stride, nullptr,
                        accumulate);
        });
    });
  });
  check_launch("matmul kernel");
}

void launch_matmul_group(GgmlType w_type, MatmulGroup g, int64_t n_in, const uint8_t* act, size_t act_stride,
                         int64_t cols, const float* x_raw, cudaStream_t stream) {
  if (g.n < 1 || g.n > kMatmulGroupMax || !decode_matvec(w_type, cols))
    check_cuda(cudaErrorInvalidValue, "matmul group kernel (parts or a type decode_matvec refuses)");
  const int nc = col_tile(cols);
  const size_t quant_smem = x_raw ? act_row_stride(GgmlType::Q8_0, n_in) * static_cast<size_t>(nc) : 0;
  with_weight_traits(w_type, [&]<class T>() {
    with_col_tile(nc, [&]<int NC>() {
      constexpr int kWarps = quantizing_matmul_warps<T, NC>();
      const int warps = x_raw ? kWarps : kWarpsPerBlock;
      unsigned blocks = 0;
      for (int p = 0; p < g.n; ++p) {
        g.first_block[p] = blocks;
        blocks += matvec_grid(g.part[p].n_out, warps, 1).x;
      }
      const dim3 grid(blocks, static_cast<unsigned>((cols + nc - 1) / nc));
      if (x_raw)
        launch_kernel(matmul_group_kernel<T, NC, true, kWarps>, grid, kWarps * kWarp, quant_smem, stream, g,
                      n_in, act, act_stride, cols, x_raw);
      else
        with_act_staging<T, NC>(n_in, [&]<bool kStage>(size_t smem) {
          launch_kernel(matmul_group_kernel<T, NC, false, kWarpsPerBlock, kStage>, grid,
                        kWarpsPerBlock * kWarp, smem, stream, g, n_in, act, act_stride, cols, nullptr);
        });
    });
  });
  check_launch("matmul group kernel");
}

}  // namespace df::backend::cuda

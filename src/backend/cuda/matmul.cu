// matmul: one warp per output row, one launch per product, grid (rows / 4, activation rows / NC). For
// decode (1-8 activation rows) each weight byte is read from HBM once; for more rows the grid's y dimension
// walks tiles of 8 rows, each re-reading the weight (from L2 when it fits: 50 MB on an H100/H200) — a
// register-tiled product, not a tensor-core GEMM (docs/ARCHITECTURE.md "CUDA backend" lists that as to do).
#include "backend/cuda/matvec.cuh"

namespace df::backend::cuda {
namespace {

template <class T, int NC>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    matmul_kernel(const uint8_t* w, size_t row_bytes, int64_t n_out, int64_t n_in, const uint8_t* act,
                  size_t act_stride, int64_t cols, float* y, int64_t y_stride) {
  __shared__ __align__(16) uint8_t smem[kWarpsPerBlock][kSmemPerWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (o >= n_out) return;  // the whole warp leaves
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * NC;
  const int nc = static_cast<int>(cols - c0 < NC ? cols - c0 : NC);
  typename T::Acc acc[NC];
  row_dot<T, NC>(w + o * row_bytes, n_in, act + c0 * act_stride, act_stride, nc, smem[warp], acc);
  if (lane == 0)
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (c < nc) y[(c0 + c) * y_stride + o] = static_cast<float>(acc[c]);
}

}  // namespace

void launch_matmul(GgmlType w_type, const uint8_t* w, size_t row_bytes, int64_t n_out, int64_t n_in,
                   const uint8_t* act, size_t act_stride, int64_t cols, float* y, int64_t y_stride,
                   cudaStream_t stream) {
  if (n_out <= 0 || cols <= 0) return;
  const int nc = col_tile(cols);
  const dim3 grid(static_cast<unsigned>((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>((cols + nc - 1) / nc));
  with_weight_traits(w_type, [&]<class T>() {
    with_col_tile(nc, [&]<int NC>() {
      matmul_kernel<T, NC><<<grid, kWarpsPerBlock * kWarp, 0, stream>>>(w, row_bytes, n_out, n_in, act,
                                                                        act_stride, cols, y, y_stride);
    });
  });
  check_launch("matmul kernel");
}

}  // namespace df::backend::cuda

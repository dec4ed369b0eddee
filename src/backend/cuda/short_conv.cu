// LFM2's gated short convolution (the CPU backend's short_conv.cpp), bit for bit: a thread per (token,
// channel), accumulating in float in tap order as the CPU does, then the state advanced.
#include <algorithm>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q8_block.cuh"

namespace df::backend::cuda {
namespace {

// A token's output needs the b ⊙ x of the l_cache - 1 tokens before it, which are inputs (this batch's rows
// or the state), not outputs: every (token, channel) is computed on its own thread, with the same operations
// in the same order as the CPU's sequential walk (b ⊙ x, then the taps oldest first, then c ⊙ sum).
__device__ __forceinline__ float conv_input(const float* bcx, int64_t n, const float* state, int hist_len,
                                            int64_t s, int64_t ch) {
  if (s < 0) return state[(hist_len + s) * n + ch];
  const float* row = bcx + s * 3 * n;
  return row[ch] * row[2 * n + ch];
}

__device__ __forceinline__ float conv_row(const float* bcx, int64_t n, const float* w, int hist_len,
                                          const float* state, int64_t t, int64_t ch, float* y) {
  float sum = 0.0f;
  for (int j = 0; j < hist_len; ++j) sum += w[j] * conv_input(bcx, n, state, hist_len, t - hist_len + j, ch);
  sum += w[hist_len] * conv_input(bcx, n, state, hist_len, t, ch);
  const float v = bcx[t * 3 * n + n + ch] * sum;
  y[t * n + ch] = v;
  return v;
}

__global__ void short_conv_kernel(const float* bcx, int64_t rows, int64_t n, const float* conv_w, int l_cache,
                                  const float* state, float* y) {
  pdl_begin();
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= n) return;
  for (int64_t t = blockIdx.y; t < rows; t += gridDim.y)
    conv_row(bcx, n, conv_w + ch * l_cache, l_cache - 1, state, t, ch, y);
}

// A few tokens (decode): a thread per channel computes its outputs and then advances its channel's state,
// one launch instead of two. With q (n a multiple of 32, so that a warp's channels are one whole Q8_0
// group): each warp also quantizes its 32 values of every row (warp_quantize_q8_0_group).
constexpr int64_t kFusedConvRows = 8;
__global__ void short_conv_fused_kernel(const float* bcx, int64_t rows, int64_t n, const float* conv_w,
                                        int l_cache, float* state, float* y, uint8_t* q) {
  pdl_begin();
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= n) return;
  const int hist_len = l_cache - 1;
  for (int64_t t = 0; t < rows; ++t) {
    const float v = conv_row(bcx, n, conv_w + ch * l_cache, hist_len, state, t, ch, y);
    if (q) warp_quantize_q8_0_group(v, q + t * act_row_stride(GgmlType::Q8_0, n), n, ch / 32);
  }
  for (int i = 0; i < hist_len; ++i)
    state[i * n + ch] = conv_input(bcx, n, state, hist_len, rows - hist_len + i, ch);
}

// The new state: the b ⊙ x of the last l_cache - 1 tokens, oldest first. Ascending, each slot reads a later
// slot of the old state (rows >= 1), which is not yet overwritten.
__global__ void short_conv_state_kernel(const float* bcx, int64_t rows, int64_t n, int l_cache,
                                        float* state) {
  pdl_begin();
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= n) return;
  const int hist_len = l_cache - 1;
  for (int i = 0; i < hist_len; ++i)
    state[i * n + ch] = conv_input(bcx, n, state, hist_len, rows - hist_len + i, ch);
}

}  // namespace

bool short_conv_quantizes(int64_t rows, int64_t n) {
  return rows >= 1 && rows <= kFusedConvRows && n % 32 == 0;
}

void launch_short_conv(const float* bcx, int64_t rows, int64_t n, const float* conv_w, int l_cache,
                       float* state, float* y, uint8_t* q, cudaStream_t stream) {
  if (n <= 0) return;
  if (rows <= 0) return;
  if (q && !short_conv_quantizes(rows, n)) {
    check_cuda(cudaErrorInvalidValue,
               "short_conv kernel (quantized rows where short_conv_quantizes refuses)");
  }
  const unsigned blocks = static_cast<unsigned>((n + 127) / 128);
  if (rows <= kFusedConvRows) {
    launch_kernel(short_conv_fused_kernel, blocks, 128, 0, stream, bcx, rows, n, conv_w, l_cache, state, y,
                  q);
    check_launch("short_conv kernel");
    return;
  }
  launch_kernel(short_conv_kernel, dim3(blocks, static_cast<unsigned>(std::min<int64_t>(rows, 65535))), 128,
                0, stream, bcx, rows, n, conv_w, l_cache, state, y);
  check_launch("short_conv kernel");
  launch_kernel(short_conv_state_kernel, blocks, 128, 0, stream, bcx, rows, n, l_cache, state);
  check_launch("short_conv state kernel");
}

}  // namespace df::backend::cuda

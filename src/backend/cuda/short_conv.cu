// LFM2's gated short convolution (the CPU backend's short_conv.cpp): one thread per channel walks the rows
// in order with the channel's history in registers, accumulating in float in tap order, as the CPU does.
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {
namespace {

constexpr int kMaxTaps = 64;

__global__ void short_conv_kernel(const float* bcx, int64_t rows, int64_t n, const float* conv_w, int l_cache,
                                  float* state, float* y) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= n) return;
  const int hist_len = l_cache - 1;
  float hist[kMaxTaps];
  for (int j = 0; j < hist_len; ++j) hist[j] = state[j * n + ch];
  const float* w = conv_w + ch * l_cache;
  for (int64_t t = 0; t < rows; ++t) {
    const float* row = bcx + t * 3 * n;
    const float z = row[ch] * row[2 * n + ch];
    float sum = 0.0f;
    for (int j = 0; j < hist_len; ++j) sum += w[j] * hist[j];
    sum += w[hist_len] * z;
    y[t * n + ch] = row[n + ch] * sum;
    for (int j = 0; j + 1 < hist_len; ++j) hist[j] = hist[j + 1];
    hist[hist_len - 1] = z;
  }
  for (int j = 0; j < hist_len; ++j) state[j * n + ch] = hist[j];
}

}  // namespace

void launch_short_conv(const float* bcx, int64_t rows, int64_t n, const float* conv_w, int l_cache,
                       float* state, float* y, cudaStream_t stream) {
  if (n <= 0) return;
  short_conv_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0, stream>>>(bcx, rows, n, conv_w, l_cache,
                                                                                state, y);
  check_launch("short_conv kernel");
}

}  // namespace df::backend::cuda

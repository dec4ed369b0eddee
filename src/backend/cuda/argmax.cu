// Greedy decoding's choice on the device (CudaBackend::argmax): util/argmax.h's first_argmax of each row, a
// block per row. Each thread keeps the first index of its greatest value over a strided scan, then the block
// keeps the greatest value, the lowest index among equals: the first index of the row's greatest value.
#include <cstdint>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {
namespace {

constexpr int kArgmaxThreads = 1024;
constexpr int32_t kNoIndex = 0x7FFFFFFF;

struct Candidate {
  float value;
  int32_t index;  // kNoIndex: none yet (every value seen was NaN)
};
// The better of two candidates: a greater value, or an equal one (+0 and -0 equal) at a lower index.
__device__ __forceinline__ Candidate better(Candidate a, Candidate b) {
  if (a.index == kNoIndex) return b;
  if (b.index == kNoIndex) return a;
  return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
}
__device__ __forceinline__ Candidate warp_better(Candidate c) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const Candidate other{__shfl_xor_sync(0xffffffffu, c.value, o), __shfl_xor_sync(0xffffffffu, c.index, o)};
    c = better(c, other);
  }
  return c;
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* x, int64_t n, int32_t* ids) {
  pdl_begin();
  __shared__ Candidate per_warp[kArgmaxThreads / kWarp];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  Candidate c{0.0f, kNoIndex};
  for (int64_t i = threadIdx.x; i < n; i += kArgmaxThreads) {
    const float v = row[i];
    // Strictly greater only: this thread's indices rise, so it keeps the first of its equal values.
    if (v == v && (c.index == kNoIndex || v > c.value)) c = {v, static_cast<int32_t>(i)};
  }
  c = warp_better(c);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  if (lane == 0) per_warp[warp] = c;
  __syncthreads();
  if (warp != 0) return;
  c = lane < kArgmaxThreads / kWarp ? per_warp[lane] : Candidate{0.0f, kNoIndex};
  c = warp_better(c);
  if (lane == 0) ids[blockIdx.x] = row[0] != row[0] || c.index == kNoIndex ? 0 : c.index;
}

}  // namespace

void launch_argmax(const float* x, int64_t rows, int64_t n, int32_t* ids, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  launch_kernel(argmax_kernel, static_cast<unsigned>(rows), kArgmaxThreads, 0, stream, x, n, ids);
  check_launch("argmax kernel");
}

}  // namespace df::backend::cuda

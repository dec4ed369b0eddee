// Activation quantization on the GPU, value for value what quant::quantize_activation (ggml's reference
// quantizers) produces, stored in the backend's aligned layout (kernels.h act_row_stride).
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q8_block.cuh"

namespace df::backend::cuda {
namespace {

__device__ __forceinline__ const float* src_row(const float* x, int64_t x_stride, const int32_t* rows_map,
                                                int64_t r) {
  return x + (rows_map ? static_cast<int64_t>(rows_map[r]) : r) * x_stride;
}

// Q8_0 / Q8_1: one warp per 32-value block. d = amax / 127, q = roundf(x / d) (half away from zero, the
// unrounded d), d stored as f16; Q8_1's s = f16(d * sum(q)).
template <bool kQ81>
__global__ void quantize_q8_kernel(const float* x, int64_t x_stride, const int32_t* rows_map, int64_t n,
                                   uint8_t* dst, size_t stride) {
  pdl_begin();
  const int64_t r = blockIdx.y;
  const int64_t nb = n / 32;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (b >= nb) return;
  const int lane = threadIdx.x % kWarp;
  const float v = src_row(x, x_stride, rows_map, r)[b * 32 + lane];
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127;
  const int q = q8_0_value(v, q8_0_inverse(d));  // in [-127, 127]
  uint8_t* row = dst + r * stride;
  reinterpret_cast<int8_t*>(row)[b * 32 + lane] = static_cast<int8_t>(q);
  const int sum = kQ81 ? warp_sum(q) : 0;
  if (lane == 0) {
    float* scales = reinterpret_cast<float*>(row + n);
    scales[b] = round_f16(d);
    if (kQ81) scales[nb + b] = round_f16(static_cast<float>(sum) * d);
  }
}

// The same with rows 16-byte aligned (the usual case): 8 lanes per 32-value block, a float4 each, so that a
// warp quantizes four blocks with whole-line loads (a prompt's 512 rows: 13 us a launch one warp per block).
// The maximum and the integer sum do not depend on the order they are formed in: the same bytes.
constexpr int kQ8VecThreads = 256;
template <bool kQ81>
__global__ void __launch_bounds__(kQ8VecThreads)
    quantize_q8_vec_kernel(const float* x, int64_t x_stride, const int32_t* rows_map, int64_t n, uint8_t* dst,
                           size_t stride) {
  pdl_begin();
  const int64_t r = blockIdx.y;
  const int64_t nb = n / 32;
  const int64_t b = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 8;
  const int sub = static_cast<int>(threadIdx.x) % 8;
  const bool valid = b < nb;  // no early return: the whole warp takes part in the shuffles
  const float4 f = valid ? reinterpret_cast<const float4*>(src_row(x, x_stride, rows_map, r))[b * 8 + sub]
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float amax = fmaxf(fmaxf(fabsf(f.x), fabsf(f.y)), fmaxf(fabsf(f.z), fabsf(f.w)));
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o, 8));
  const float d = amax / 127;
  const float id = q8_0_inverse(d);
  const int q[4] = {q8_0_value(f.x, id), q8_0_value(f.y, id), q8_0_value(f.z, id), q8_0_value(f.w, id)};
  int sum = kQ81 ? q[0] + q[1] + q[2] + q[3] : 0;
  if (kQ81)
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o, 8);
  if (!valid) return;
  uint8_t* row = dst + r * stride;
  uint32_t word = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) word |= (static_cast<uint32_t>(q[j]) & 0xFFu) << (8 * j);
  reinterpret_cast<uint32_t*>(row)[b * 8 + sub] = word;
  if (sub == 0) {
    float* scales = reinterpret_cast<float*>(row + n);
    scales[b] = round_f16(d);
    if (kQ81) scales[nb + b] = round_f16(static_cast<float>(sum) * d);
  }
}

// Q8_K: one block of 256 threads per super-block. The value of largest magnitude (the first on a tie) maps
// to -127: iscale = -127 / max, q = min(127, nearest(iscale * x)), d = 1 / iscale, plus the 16-value sums.
__global__ void quantize_q8_k_kernel(const float* x, int64_t x_stride, const int32_t* rows_map, int64_t n,
                                     uint8_t* dst, size_t stride) {
  pdl_begin();
  __shared__ float s_amax[8];
  __shared__ int s_idx[8];
  __shared__ float s_max;
  const int64_t r = blockIdx.y, b = blockIdx.x;
  const int t = threadIdx.x, lane = t % kWarp, warp = t / kWarp;
  const float* xr = src_row(x, x_stride, rows_map, r) + b * 256;
  const float v = xr[t];
  float a = fabsf(v);
  int idx = t;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float oa = __shfl_xor_sync(0xffffffffu, a, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (oa > a || (oa == a && oi < idx)) {
      a = oa;
      idx = oi;
    }
  }
  if (lane == 0) {
    s_amax[warp] = a;
    s_idx[warp] = idx;
  }
  __syncthreads();
  if (t == 0) {
    float best = s_amax[0];
    int bi = s_idx[0];
    for (int w = 1; w < 8; ++w)
      if (s_amax[w] > best) {  // warps hold ascending indices: the earlier one wins a tie
        best = s_amax[w];
        bi = s_idx[w];
      }
    s_max = best == 0.0f ? 0.0f : xr[bi];
  }
  __syncthreads();
  const float max = s_max;
  uint8_t* row = dst + r * stride;
  int8_t* qs = reinterpret_cast<int8_t*>(row) + b * 256;
  float* d = reinterpret_cast<float*>(row + n);
  int16_t* bsums = reinterpret_cast<int16_t*>(row + n + (n / 256) * 4);
  int q = 0;
  if (max != 0.0f) {
    const float iscale = -127.f / max;
    q = min(127, __float2int_rn(iscale * v));
    if (t == 0) d[b] = 1 / iscale;
  } else if (t == 0) {
    d[b] = 0.0f;
  }
  qs[t] = static_cast<int8_t>(q);
  int s = q;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (t % 16 == 0) bsums[b * 16 + t / 16] = static_cast<int16_t>(s);
}

// F16 / BF16 (round to nearest even) and F32 (copy), one thread per value.
template <int kKind>
__global__ void quantize_float_kernel(const float* x, int64_t x_stride, const int32_t* rows_map, int64_t n,
                                      uint8_t* dst, size_t stride) {
  pdl_begin();
  const int64_t r = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = src_row(x, x_stride, rows_map, r)[i];
  uint8_t* row = dst + r * stride;
  if (kKind == 0) reinterpret_cast<float*>(row)[i] = v;
  if (kKind == 1) reinterpret_cast<uint16_t*>(row)[i] = f32_to_f16(v);
  if (kKind == 2) reinterpret_cast<uint16_t*>(row)[i] = f32_to_bf16(v);
}

}  // namespace

void launch_quantize(GgmlType act, const float* x, int64_t x_stride, const int32_t* rows_map, int64_t rows,
                     int64_t n, uint8_t* dst, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  const size_t stride = act_row_stride(act, n);
  switch (act) {
    case GgmlType::Q8_0:
    case GgmlType::Q8_1: {
      if (reinterpret_cast<uintptr_t>(x) % 16 == 0 && x_stride % 4 == 0) {
        const dim3 grid(static_cast<unsigned>((n / 32 * 8 + kQ8VecThreads - 1) / kQ8VecThreads),
                        static_cast<unsigned>(rows));
        if (act == GgmlType::Q8_0)
          launch_kernel(quantize_q8_vec_kernel<false>, grid, kQ8VecThreads, 0, stream, x, x_stride, rows_map,
                        n, dst, stride);
        else
          launch_kernel(quantize_q8_vec_kernel<true>, grid, kQ8VecThreads, 0, stream, x, x_stride, rows_map,
                        n, dst, stride);
        break;
      }
      const dim3 grid(static_cast<unsigned>((n / 32 + 7) / 8), static_cast<unsigned>(rows));
      if (act == GgmlType::Q8_0)
        launch_kernel(quantize_q8_kernel<false>, grid, 256, 0, stream, x, x_stride, rows_map, n, dst, stride);
      else
        launch_kernel(quantize_q8_kernel<true>, grid, 256, 0, stream, x, x_stride, rows_map, n, dst, stride);
      break;
    }
    case GgmlType::Q8_K:
      launch_kernel(quantize_q8_k_kernel, dim3(static_cast<unsigned>(n / 256), static_cast<unsigned>(rows)),
                    256, 0, stream, x, x_stride, rows_map, n, dst, stride);
      break;
    default: {
      const dim3 grid(static_cast<unsigned>((n + 255) / 256), static_cast<unsigned>(rows));
      if (act == GgmlType::F32)
        launch_kernel(quantize_float_kernel<0>, grid, 256, 0, stream, x, x_stride, rows_map, n, dst, stride);
      else if (act == GgmlType::F16)
        launch_kernel(quantize_float_kernel<1>, grid, 256, 0, stream, x, x_stride, rows_map, n, dst, stride);
      else
        launch_kernel(quantize_float_kernel<2>, grid, 256, 0, stream, x, x_stride, rows_map, n, dst, stride);
    }
  }
  check_launch("activation quantization kernel");
}

}  // namespace df::backend::cuda

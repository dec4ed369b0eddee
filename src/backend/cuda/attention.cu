// The f16 KV cache and llama.cpp's non-flash attention (the CPU backend's attention.cpp): one block of 16
// warps per (query row, head), so that a decode step's few blocks (one per head) still keep hundreds of keys
// in flight. Scores: a thread per key, the f16 × f16 products (exact in float) summed in double; softmax over
// the visible keys with the sink in max and denominator (double sum); P rounded to f16; P·V: a warp per
// output dim at a time, its lanes over the keys (coalesced reads of the transposed V), each lane's double
// sum then the warp's tree. Scores live in backend scratch (rows × n_head × n_ctx floats per launch; the
// host splits long prefills into chunks).
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {
namespace {

constexpr int kAttnWarps = 16;

__global__ void kv_store_kernel(uint16_t* k_cache, uint16_t* v_cache, int n_ctx, int64_t row, const float* k,
                                const float* v, int pos0, const int32_t* pos0_device) {
  pdl_begin();
  const int64_t r = blockIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= row) return;
  const int64_t p = (pos0_device ? *pos0_device : pos0) + r;
  k_cache[p * row + i] = f32_to_f16(k[r * row + i]);
  v_cache[i * n_ctx + p] = f32_to_f16(v[r * row + i]);
}

__device__ float block_max(float v, float* red) {
  v = warp_max(v);
  if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = v;
  __syncthreads();
  float m = red[0];
  for (int w = 1; w < kAttnWarps; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  return m;
}
__device__ double block_sum(double v, double* red) {
  v = warp_sum(v);
  if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = v;
  __syncthreads();
  double s = 0.0;
  for (int w = 0; w < kAttnWarps; ++w) s += red[w];
  __syncthreads();
  return s;
}

__global__ void __launch_bounds__(kAttnWarps* kWarp)
    attention_kernel(const uint16_t* k_cache, const uint16_t* v_cache, const float* q, int pos0,
                     const int32_t* pos0_device, AttnArgs a, float* out, float* scores) {
  pdl_begin();
  extern __shared__ float s_q[];  // head_dim values of q rounded to f16
  __shared__ float red_f[kAttnWarps];
  __shared__ double red_d[kAttnWarps];
  const int h = blockIdx.x;
  const int64_t r = blockIdx.y;
  const int hd = a.head_dim, kh = h / (a.n_head / a.n_head_kv);
  const int64_t at = (pos0_device ? *pos0_device : pos0) + r;
  const int64_t first = a.window > 0 ? max(int64_t{0}, at - a.window + 1) : 0;
  const int64_t n_kv = at - first + 1;
  const float* qr = q + (r * a.n_head + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) s_q[d] = round_f16(qr[d]);
  __syncthreads();
  float* sc = scores + (r * a.n_head + h) * static_cast<int64_t>(a.n_ctx);
  const int64_t k_row = static_cast<int64_t>(a.n_head_kv) * hd;

  // Scores: a thread per key, the head_dim products (exact in float) summed in double in index order.
  float local_max = a.sinks ? a.sinks[h] : -INFINITY;
  for (int64_t j = threadIdx.x; j < n_kv; j += blockDim.x) {
    const uint16_t* kr = k_cache + (first + j) * k_row + static_cast<int64_t>(kh) * hd;
    double s = 0.0;
    if (hd % 2 == 0) {  // rows 4-byte aligned: the values two at a time
      for (int d = 0; d < hd; d += 2) {
        const uint32_t pair = *reinterpret_cast<const uint32_t*>(kr + d);
        s += static_cast<double>(__fmul_rn(s_q[d], f16_to_f32(static_cast<uint16_t>(pair & 0xFFFFu))));
        s += static_cast<double>(__fmul_rn(s_q[d + 1], f16_to_f32(static_cast<uint16_t>(pair >> 16))));
      }
    } else {
      for (int d = 0; d < hd; ++d) s += static_cast<double>(__fmul_rn(s_q[d], f16_to_f32(kr[d])));
    }
    float v = static_cast<float>(s) * a.scale;
    if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
    sc[j] = v;
    local_max = fmaxf(local_max, v);
  }
  const float max = block_max(local_max, red_f);
  double local_sum = 0.0;
  for (int64_t j = threadIdx.x; j < n_kv; j += blockDim.x) {
    const float e = expf(sc[j] - max);
    sc[j] = e;
    local_sum += static_cast<double>(e);
  }
  double sum = block_sum(local_sum, red_d);
  if (a.sinks) sum += static_cast<double>(expf(a.sinks[h] - max));
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = threadIdx.x; j < n_kv; j += blockDim.x) sc[j] = round_f16(sc[j] * inv);
  __syncthreads();

  // P·V: warp w sums dims w, w + kAttnWarps, ...: lane l the keys l, l + 32, ... of the dim's row of the
  // transposed V in double, then the warp's tree of the lanes' sums.
  float* o = out + (r * a.n_head + h) * hd;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  for (int d = static_cast<int>(threadIdx.x) / kWarp; d < hd; d += kAttnWarps) {
    const uint16_t* vr = v_cache + (static_cast<int64_t>(kh) * hd + d) * a.n_ctx + first;
    double s = 0.0;
    for (int64_t j = lane; j < n_kv; j += kWarp)
      s += static_cast<double>(__fmul_rn(sc[j], f16_to_f32(vr[j])));
    s = warp_sum(s);
    if (lane == 0) o[d] = static_cast<float>(s);
  }
}

// s_q: head_dim floats.
size_t attention_smem_bytes(int hd) { return static_cast<size_t>(hd) * sizeof(float); }

}  // namespace

void launch_kv_store(uint16_t* k_cache, uint16_t* v_cache, int n_ctx, int64_t row, const float* k,
                     const float* v, int64_t rows, int pos0, const int32_t* pos0_device,
                     cudaStream_t stream) {
  if (rows <= 0 || row <= 0) return;
  launch_kernel(kv_store_kernel, dim3(static_cast<unsigned>((row + 255) / 256), static_cast<unsigned>(rows)),
                256, 0, stream, k_cache, v_cache, n_ctx, row, k, v, pos0, pos0_device);
  check_launch("kv_store kernel");
}

void launch_attention(const uint16_t* k_cache, const uint16_t* v_cache, const float* q, int64_t rows,
                      int pos0, const int32_t* pos0_device, const AttnArgs& a, float* out, float* scores,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  launch_kernel(attention_kernel, dim3(static_cast<unsigned>(a.n_head), static_cast<unsigned>(rows)),
                kAttnWarps * kWarp, attention_smem_bytes(a.head_dim), stream, k_cache, v_cache, q, pos0,
                pos0_device, a, out, scores);
  check_launch("attention kernel");
}

}  // namespace df::backend::cuda

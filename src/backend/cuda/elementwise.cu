// Elementwise ops and get_rows (exact dequantization of a table row, as quant::dequantize_row).
#include <cstring>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"

namespace df::backend::cuda {
namespace {

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* y) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  y[i] = g / (1.0f + expf(-g)) * up[i];  // ggml's scalar silu, then the product
}

__global__ void write_bytes_kernel(uint8_t* dst, ParamBytes src) {
  pdl_begin();
  for (uint32_t i = threadIdx.x; i < src.n; i += blockDim.x) dst[i] = src.bytes[i];
}

__global__ void copy_floats_kernel(float* dst, const float* src, int64_t n) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i];
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void add_bias_rows_kernel(float* x, const float* bias, int64_t rows, int64_t n) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * n) x[i] += bias[i % n];
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fmul_rn(x[i], s);
}

__global__ void mul_rows_kernel(float* x, const float* w, int64_t rows, int64_t n) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * n) x[i] = __fmul_rn(x[i], w[i % n]);
}

// The CPU's three roundings (scale, tanh, scale); CUDA's tanhf is within 2 ulp of glibc's.
__global__ void softcap_kernel(float* x, int64_t n, float r, float cap) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fmul_rn(tanhf(__fmul_rn(x[i], r)), cap);
}

__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) {
  return p[0] | (static_cast<uint32_t>(p[1]) << 8);
}
__device__ __forceinline__ float ld_f16(const uint8_t* p) {
  return f16_to_f32(static_cast<uint16_t>(ld_u16(p)));
}
__device__ __forceinline__ float ld_f32(const uint8_t* p) {
  return __uint_as_float(ld_u16(p) | (ld_u16(p + 2) << 16));
}

__device__ void scale_min_k4(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Value i of a row of the given type, by the arithmetic of quant/'s dequantize functions.
__device__ float dequant_value(GgmlType t, const uint8_t* row, int64_t i) {
  constexpr int8_t kMx[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const int j32 = static_cast<int>(i % 32);
  const int l16 = j32 % 16;
  switch (t) {
    case GgmlType::F32:
      return ld_f32(row + 4 * i);
    case GgmlType::F16:
      return ld_f16(row + 2 * i);
    case GgmlType::BF16:
      return bf16_to_f32(static_cast<uint16_t>(ld_u16(row + 2 * i)));
    case GgmlType::Q4_0: {
      const uint8_t* b = row + (i / 32) * 18;
      const int q = j32 < 16 ? (b[2 + l16] & 0xF) : (b[2 + l16] >> 4);
      return static_cast<float>(q - 8) * ld_f16(b);
    }
    case GgmlType::Q4_1: {
      const uint8_t* b = row + (i / 32) * 20;
      const int q = j32 < 16 ? (b[4 + l16] & 0xF) : (b[4 + l16] >> 4);
      return static_cast<float>(q) * ld_f16(b) + ld_f16(b + 2);
    }
    case GgmlType::Q8_0: {
      const uint8_t* b = row + (i / 32) * 34;
      return static_cast<float>(static_cast<int8_t>(b[2 + j32])) * ld_f16(b);
    }
    case GgmlType::Q8_1: {
      const uint8_t* b = row + (i / 32) * 36;
      return static_cast<float>(static_cast<int8_t>(b[4 + j32])) * ld_f16(b);
    }
    case GgmlType::MXFP4: {
      const uint8_t* b = row + (i / 32) * 17;
      const int q = j32 < 16 ? (b[1 + l16] & 0xF) : (b[1 + l16] >> 4);
      return static_cast<float>(kMx[q]) * e8m0_half(b[0]);
    }
    case GgmlType::Q8_K: {
      const uint8_t* b = row + (i / 256) * 292;
      return ld_f32(b) * static_cast<float>(static_cast<int8_t>(b[4 + i % 256]));
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool q5 = t == GgmlType::Q5_K;
      const uint8_t* b = row + (i / 256) * (q5 ? 176 : 144);
      const int k = static_cast<int>(i % 256), chunk = k / 64, within = k % 64, l = within % 32;
      const bool high = within >= 32;
      int sc, m;
      scale_min_k4(b + 4, 2 * chunk + (high ? 1 : 0), sc, m);
      const float d1 = ld_f16(b) * static_cast<float>(sc), m1 = ld_f16(b + 2) * static_cast<float>(m);
      const uint8_t qb = b[(q5 ? 48 : 16) + 32 * chunk + l];
      int q = high ? (qb >> 4) : (qb & 0xF);
      if (q5 && (b[16 + l] & (1u << (2 * chunk + (high ? 1 : 0))))) q += 16;
      return d1 * static_cast<float>(q) - m1;
    }
    case GgmlType::Q6_K: {
      const uint8_t* b = row + (i / 256) * 210;
      const int k = static_cast<int>(i % 256), half = k / 128, e = k % 128, l = e % 32, g = e / 32;
      const uint8_t* ql = b + 64 * half;
      const uint8_t qh = b[128 + 32 * half + l];
      int q;
      switch (g) {
        case 0:
          q = (ql[l] & 0xF) | (((qh >> 0) & 3) << 4);
          break;
        case 1:
          q = (ql[l + 32] & 0xF) | (((qh >> 2) & 3) << 4);
          break;
        case 2:
          q = (ql[l] >> 4) | (((qh >> 4) & 3) << 4);
          break;
        default:
          q = (ql[l + 32] >> 4) | (((qh >> 6) & 3) << 4);
          break;
      }
      const float sc = static_cast<float>(static_cast<int8_t>(b[192 + k / 16]));
      return ld_f16(b + 208) * sc * static_cast<float>(q - 32);
    }
    default:
      return 0.0f;
  }
}

__global__ void get_rows_kernel(GgmlType type, const uint8_t* table, size_t row_bytes, int64_t n_rows,
                                int64_t n_in, const int32_t* ids, float* out, DeviceError* err) {
  pdl_begin();
  const int32_t id = ids[blockIdx.x];
  float* o = out + static_cast<int64_t>(blockIdx.x) * n_in;
  const bool ok = id >= 0 && id < n_rows;
  if (!ok && threadIdx.x == 0 && atomicCAS(&err->code, 0, kErrGetRowsId) == 0) {
    err->value = id;
    err->limit = static_cast<int32_t>(n_rows);
  }
  const uint8_t* row = table + static_cast<size_t>(ok ? id : 0) * row_bytes;
  for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x) o[i] = ok ? dequant_value(type, row, i) : 0.0f;
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

}  // namespace

void launch_write_bytes(void* dst, const void* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  ParamBytes p;
  p.n = static_cast<uint32_t>(n);
  std::memcpy(p.bytes, src, n);
  launch_kernel(write_bytes_kernel, 1, 256, 0, stream, static_cast<uint8_t*>(dst), p);
  check_launch("write bytes kernel");
}

void launch_copy_floats(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(copy_floats_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, dst, src, n);
  check_launch("copy floats kernel");
}

void launch_swiglu(const float* gate, const float* up, int64_t n, float* y, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(swiglu_kernel, blocks_for(n), 256, 0, stream, gate, up, n, y);
  check_launch("swiglu kernel");
}

void launch_add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(add_kernel, blocks_for(n), 256, 0, stream, x, y, n);
  check_launch("add kernel");
}

void launch_add_bias_rows(float* x, const float* bias, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  launch_kernel(add_bias_rows_kernel, blocks_for(rows * n), 256, 0, stream, x, bias, rows, n);
  check_launch("add_bias_rows kernel");
}

void launch_scale(float* x, int64_t n, float s, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(scale_kernel, blocks_for(n), 256, 0, stream, x, n, s);
  check_launch("scale kernel");
}

void launch_mul_rows(float* x, const float* w, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  launch_kernel(mul_rows_kernel, blocks_for(rows * n), 256, 0, stream, x, w, rows, n);
  check_launch("mul_rows kernel");
}

void launch_softcap(float* x, int64_t n, float r, float cap, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(softcap_kernel, blocks_for(n), 256, 0, stream, x, n, r, cap);
  check_launch("softcap kernel");
}

void launch_get_rows(GgmlType type, const uint8_t* table, size_t row_bytes, int64_t n_rows, int64_t n_in,
                     const int32_t* ids, int64_t n, float* out, DeviceError* err, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(get_rows_kernel, static_cast<unsigned>(n), 256, 0, stream, type, table, row_bytes, n_rows,
                n_in, ids, out, err);
  check_launch("get_rows kernel");
}

}  // namespace df::backend::cuda

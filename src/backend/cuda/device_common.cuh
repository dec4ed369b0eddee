#pragma once
// Device-side helpers shared by the kernels: the exact f16/bf16 conversions of quant/fp16.cpp, warp
// reductions, and unaligned word loads from shared memory.
//
// Every .cu file is compiled with --fmad=false (CMakeLists.txt): the CPU reference code is compiled without
// FMA contraction, so a * b + c must round twice here too for the per-element results to agree bit for bit.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace df::backend::cuda {

constexpr int kWarp = 32;

// Programmatic dependent launch (sm_90): every kernel is launched with launch_kernel(), waits in pdl_wait()
// until the previous kernel of the stream has completed and its writes are visible, and then lets the next
// kernel be scheduled (pdl_launch_dependents) without waiting for its own completion. So the launch latency
// between dependent kernels (a decode step is ~500 of them) overlaps the previous kernel's run, and whatever
// a kernel does before its pdl_wait() overlaps it too: only reads of memory no kernel writes (weights,
// uploaded by copies) may come before the wait. Every other read and write comes after it, so their order is
// that of plain stream order. The next kernel is released only after the wait, so that at most one kernel
// waits ahead: released at a kernel's start, each waiting kernel would release the next in turn and a chain
// of them would hold the SMs' block slots while they spin (measured: decode 258 tok/s against 368 without
// programmatic launches). DF_CUDA_PDL=0 launches without it (for comparison).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Both, for a kernel with nothing to read before the wait.
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_launch_dependents();
}

inline bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("DF_CUDA_PDL");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

// DF_CUDA_LAUNCH_TWICE=a,b (a measurement, never a mode to run in): every kernel whose name (as
// cudaFuncGetName gives it, mangled) contains a or b is launched twice, the second launch waiting for the
// first like any link of the chain. The decode step's time with a kernel class doubled, less the time
// without, is that class's cost inside the graph, where ncu can only time each kernel alone (session 28's
// table, docs/PERF.md). Doubling a kernel that adds into its output changes the values, not the work.
inline int launch_repeats(const void* kernel) {
  static const std::string names = [] {
    const char* v = std::getenv("DF_CUDA_LAUNCH_TWICE");
    return std::string(v ? v : "");
  }();
  if (names.empty()) return 1;
  const char* name = nullptr;
  if (cudaFuncGetName(&name, kernel) != cudaSuccess || name == nullptr) return 1;
  for (size_t begin = 0; begin < names.size();) {
    size_t end = names.find(',', begin);
    if (end == std::string::npos) end = names.size();
    if (end > begin && std::strstr(name, names.substr(begin, end - begin).c_str()) != nullptr) return 2;
    begin = end + 1;
  }
  return 1;
}

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization allowed (errors are
// left for check_launch, as a <<<>>> launch leaves them), in thread block clusters of cluster_x blocks along
// x where cluster_x > 1.
template <class... Params, class... Args>
void launch_kernel_in_clusters(unsigned cluster_x, void (*kernel)(Params...), dim3 grid, dim3 block,
                               size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2]{};
  unsigned n = 0;
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n++].val.clusterDim = {cluster_x, 1, 1};
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  for (int i = launch_repeats(reinterpret_cast<const void*>(kernel)); i > 0; --i)
    (void)cudaLaunchKernelEx(&cfg, kernel, args...);
}
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  launch_kernel_in_clusters(1, kernel, grid, block, smem, stream, args...);
}

// quant::fp16_to_fp32: every f16 value is exact in float, so the hardware conversion is the same function.
__device__ __forceinline__ float f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// quant::fp32_to_fp16, bit for bit (round to nearest even, NaN made the canonical quiet 0x7E00 | sign).
__device__ __forceinline__ uint16_t f32_to_f16(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (magnitude >= 0x38800000u) {
    const uint32_t rebiased = magnitude - (112u << 23);
    const uint32_t rounded = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;
    return static_cast<uint16_t>(sign | (rounded >= 0x7c00u ? 0x7c00u : rounded));
  }
  const float scaled = __fmul_rn(__uint_as_float(magnitude), 16777216.0f);  // * 2^24, exact
  const uint32_t mantissa = __float_as_uint(__fadd_rn(scaled, 8388608.0f)) - 0x4b000000u;
  return static_cast<uint16_t>(sign | mantissa);
}
__device__ __forceinline__ float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  const uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// quant::e8m0_to_fp32_half: 2^(e - 128).
__device__ __forceinline__ float e8m0_half(uint32_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
  return __uint_as_float(bits);
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// N 32-bit words starting at any byte offset of shared memory: N + 1 aligned loads and funnel shifts. The
// buffer must have 4 readable bytes past the last one wanted.
template <int N>
__device__ __forceinline__ void lds_words(const uint8_t* s, int off, uint32_t (&w)[N]) {
  const uint32_t* p = reinterpret_cast<const uint32_t*>(s + (off & ~3));
  const uint32_t sh = static_cast<uint32_t>(off & 3) * 8;
  uint32_t a = p[0];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint32_t b = p[i + 1];
    w[i] = __funnelshift_r(a, b, sh);
    a = b;
  }
}

// Byte `i` (runtime, < 4 N) of a little-endian array of N <= 4 32-bit words, by a select between two 64-bit
// halves and a shift. A chain of "if (i / 4 == k) word = w[k]" let the compiler turn the selection back into
// an indexed load, which put the array in local memory: four stores and loads per call inside the K-quant
// products' loops (the Q6_K output head, the Q4_K / Q5_K scales; session 29).
template <int N>
__device__ __forceinline__ uint32_t byte_of(const uint32_t (&w)[N], int i) {
  static_assert(N >= 1 && N <= 4, "at most 16 bytes");
  const auto half = [&](int k) {  // words k and k + 1 (compile-time k), zero past the array
    const uint32_t lo = k < N ? w[k < N ? k : 0] : 0u, hi = k + 1 < N ? w[k + 1 < N ? k + 1 : 0] : 0u;
    return static_cast<uint64_t>(hi) << 32 | lo;
  };
  const uint64_t v = N <= 2 ? half(0) : (i & 8) ? half(2) : half(0);
  return static_cast<uint32_t>(v >> (8 * (i & 7))) & 0xFFu;
}

}  // namespace df::backend::cuda

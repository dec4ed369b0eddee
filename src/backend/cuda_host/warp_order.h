#pragma once
// A routed expert's decode values computed on the host to the CUDA kernels' bits (--cpu-misses: the GPU
// computes the experts it holds while the host computes, from their RAM-tier records, the ones it misses).
//
// The CUDA routed kernels (backend/cuda/ffn.cu, matvec.cuh) form each output row as a warp does: the input is
// quantized to Q8_0 (block_quantize_q8_0, ggml's reference rounding), each block contributes the float its
// type's dot gives (the integer sum, then the scales in the kernel's order), lane L of 32 sums blocks L,
// L+32, L+64, ... in that order from +0, and the lanes are added by an xor butterfly (offsets 16, 8, 4, 2,
// 1). The gate/up rows go through SwiGLU with quant::portable_expf, the result is quantized again, and the
// down rows are formed the same way. Every step is an IEEE-exact operation in a fixed order, so the host
// gives the same floats; what it returns is each down row's sum before the down bias, the scale and the
// combine, which the GPU's combine kernel applies to host and device entries alike.
//
// Types: Q4_0 (ggml rows or Q4_0x16, the store's packing) and Q8_0; the SwiGLU activation without gate/up
// biases (host_experts_supported). A scalar reference and an AVX2 path for Q4_0x16 that must agree with it
// bit for bit (tests/test_backend_cuda_host_warp_order.cpp).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"

namespace df::backend::cuda_host {

// Whether a matrix of this type and packing has a warp-order path here.
bool warp_order_supported(GgmlType type, quant::RowPacking packing);

// A row of n floats quantized as the CUDA kernels quantize an activation: q[n] (int8), d[n / 32] (the f16-
// rounded scale as a float), sum[n / 32] (each block's sum of quants, for the Q4_0 offset).
struct QuantizedRow {
  int8_t* q;
  float* d;
  int32_t* sum;
};
void quantize_row_as_device(const float* x, int64_t n, const QuantizedRow& out);

// Rows [row0, row1) of w (n_in = the activation's length) against the quantized activation, each formed in
// the warp's order: out[r - row0]. `fast`: the SIMD path where there is one (same bits; false: the
// reference). For Q4_0x16, row0 and row1 must be multiples of 16.
void warp_order_rows(const Weight& w, int64_t row0, int64_t row1, const QuantizedRow& x, float* out,
                     bool fast = true);

// One routed entry: an expert's three matrices (host memory) and its input row; v receives the n_out down
// sums.
struct HostExpertJob {
  Weight gate, up, down;
  const float* x = nullptr;
  float* v = nullptr;
};

// Runs entries on a thread pool, with scratch reserved up front (nothing is allocated per call once reserve()
// has seen the largest shapes).
class HostExpertRunner {
 public:
  explicit HostExpertRunner(int n_threads);
  void reserve(size_t max_jobs, int64_t n_in, int64_t n_ff);
  void run(std::span<const HostExpertJob> jobs);
  int threads() const { return pool_.size(); }

 private:
  ThreadPool pool_;
  size_t jobs_ = 0;
  int64_t n_in_ = 0, n_ff_ = 0;
  std::vector<int8_t> q_;
  std::vector<float> d_, h_;
  std::vector<int32_t> sum_;
  QuantizedRow x_row(size_t j);
  QuantizedRow h_row(size_t j);
};

namespace detail {
// 16 rows of a Q4_0x16 group (nb blocks) in the warp's order, AVX2 (warp_order_avx2.cpp).
void q4_0x16_group_avx2(const uint8_t* group, int64_t nb, const QuantizedRow& x, float* out16);
}  // namespace detail

}  // namespace df::backend::cuda_host

#pragma once
// The CPU backend driven from the tests' own host arrays: raw-pointer forms of the ops that wrap each
// pointer as a backend view (CpuBackend::host: the CPU backend's memory is host memory) and call the
// interface's op. A pointer is wrapped without a bound, since these tests size their arrays by hand; the
// views' bounds are tested where the buffers come from the backend (test_backend_cpu_buffers.cpp).
#include <cstdint>
#include <limits>
#include <span>

#include "backend/cpu/cpu_backend.h"

namespace df::backend {

class HostCpuBackend : public CpuBackend {
 public:
  using CpuBackend::add;
  using CpuBackend::add_bias_rows;
  using CpuBackend::attention;
  using CpuBackend::CpuBackend;
  using CpuBackend::ffn;
  using CpuBackend::gather_rows;
  using CpuBackend::get_rows;
  using CpuBackend::kv_store;
  using CpuBackend::matmul;
  using CpuBackend::moe_combine_add;
  using CpuBackend::mul_rows;
  using CpuBackend::rms_norm;
  using CpuBackend::rope;
  using CpuBackend::route;
  using CpuBackend::scale;
  using CpuBackend::short_conv;
  using CpuBackend::softcap;
  using CpuBackend::swiglu;

  // A view of host memory at p with no bound (null: the absent view).
  template <class T>
  static Buf<T> h(T* p) {
    return p ? host(p, std::numeric_limits<size_t>::max() / 64) : Buf<T>{};
  }

  void matmul(const Weight& w, const float* x, int64_t rows, float* y, std::span<uint8_t> scratch) {
    matmul(w, h(x), rows, h(y), host(scratch.data(), scratch.size()));
  }
  void get_rows(const Weight& table, std::span<const int32_t> ids, float* out) {
    get_rows(table, host(ids.data(), ids.size()), static_cast<int64_t>(ids.size()), h(out));
  }
  void ffn(std::span<const FfnTask> ffns, const ActivationParams& act, const float* x, int64_t x_rows,
           float* out) {
    ffn(ffns, act, h(x), x_rows, h(out));
  }
  void rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y) {
    rms_norm(h(x), rows, n, h(weight), eps, h(y));
  }
  void rope(float* x, int64_t rows, int n_head, int head_dim, const int32_t* pos, const RopeParams& p) {
    rope(h(x), rows, n_head, head_dim, h(pos), p);
  }
  void kv_store(const KvCacheView& kv, const float* k, const float* v, int64_t rows, int pos0) {
    kv_store(kv, h(k), h(v), rows, pos0);
  }
  void attention(const KvCacheView& kv, const float* q, int64_t rows, int pos0, const AttentionParams& p,
                 float* out, std::span<float> scratch) {
    attention(kv, h(q), rows, pos0, p, h(out), host(scratch.data(), scratch.size()));
  }
  void short_conv(const float* bcx, int64_t rows, int64_t n, const float* conv_w, int l_cache, float* state,
                  float* y) {
    short_conv(h(bcx), rows, n, h(conv_w), l_cache, h(state), h(y));
  }
  void swiglu(const float* gate, const float* up, int64_t n, float* y) { swiglu(h(gate), h(up), n, h(y)); }
  void add(float* x, const float* y, int64_t n) { add(h(x), h(y), n); }
  void add_bias_rows(float* x, const float* bias, int64_t rows, int64_t n) {
    add_bias_rows(h(x), h(bias), rows, n);
  }
  void scale(float* x, int64_t n, float s) { scale(h(x), n, s); }
  void mul_rows(float* x, const float* w, int64_t rows, int64_t n) { mul_rows(h(x), h(w), rows, n); }
  void softcap(float* x, int64_t n, float cap) { softcap(h(x), n, cap); }
  void route(const RouterParams& p, const float* logits, int64_t rows, int32_t* ids, float* weights) {
    route(p, h(logits), rows, h(ids), h(weights));
  }
  void moe_combine_add(const float* expert_out, const float* weights, int64_t rows, int k, int64_t n,
                       float* x) {
    moe_combine_add(h(expert_out), h(weights), rows, k, n, h(x));
  }
};

// A KV cache view of host arrays.
inline KvCacheView host_kv(uint16_t* k, uint16_t* v, int n_ctx, int n_head_kv, int head_dim) {
  return KvCacheView{HostCpuBackend::h(k), HostCpuBackend::h(v), n_ctx, n_head_kv, head_dim};
}

}  // namespace df::backend

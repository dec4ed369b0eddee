#pragma once
// The CPU backend: straightforward loops over the scalar references of quant/ (quantize_activation +
// vec_dot), with the big matmuls split over output rows on a persistent thread pool. Every op computes each
// output row with the same code whatever the batch size or thread count, so results do not depend on how
// tokens are batched or on n_threads.
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"

namespace df::backend {

class CpuBackend final : public Backend {
 public:
  // n_threads <= 0: one per hardware core.
  explicit CpuBackend(int n_threads = 0);

  std::string_view name() const override { return "cpu"; }
  int n_threads() const override { return pool_.size(); }

  bool supports_matmul(GgmlType w) const override;
  size_t matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const override;
  void matmul(const Weight& w, const float* x, int64_t rows, float* y, std::span<uint8_t> scratch) override;
  void get_rows(const Weight& table, std::span<const int32_t> ids, float* out) override;

  void rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y) override;
  void rope_neox(float* x, int64_t rows, int n_head, int head_dim, int n_rot, const int32_t* pos,
                 float freq_base, float freq_scale) override;

  void kv_store(const KvCacheView& kv, const float* k, const float* v, int64_t rows, int pos0) override;
  size_t attention_scratch_floats(int n_ctx, int head_dim) const override;
  void attention(const KvCacheView& kv, const float* q, int64_t rows, int pos0, int n_head, float scale,
                 float* out, std::span<float> scratch) override;

  void short_conv(const float* bcx, int64_t rows, int64_t n, const float* conv_w, int l_cache, float* state,
                  float* y) override;

  void swiglu(const float* gate, const float* up, int64_t n, float* y) override;
  void add(float* x, const float* y, int64_t n) override;

  void route(const RouterParams& p, const float* logits, int64_t rows, int32_t* ids, float* weights) override;
  void moe_combine(const float* expert_out, const float* weights, int64_t rows, int k, int64_t n,
                   float* out) override;

 private:
  ThreadPool pool_;
};

}  // namespace df::backend

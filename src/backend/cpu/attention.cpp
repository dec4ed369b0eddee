// Causal GQA attention over the f16 KV cache, as llama.cpp computes it without flash attention:
// kq = mul_mat(K_f16, Q) (Q rounded to f16), soft_max_ext (scale in f32, the optional softcap, a sliding
// window as a mask, the head's sink in the max and the denominator, exp sum in double),
// kqv = mul_mat(V_f16ᵀ, P) (P rounded to f16).
//
// Both products go through the kernels' F16 gemm (F16C conversions; each f16 × f16 product is exact in
// float, the sum runs in double lanes), the roundings to f16 through the SIMD quantizer, which is
// byte-identical to quant::fp32_to_fp16. The softmax keeps its scalar float exp and sequential double sum:
// its cost is one exp per score, small next to the two products' 2 × head_dim multiply-adds per score.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tiling.h"
#include "backend/cpu/kernels/vec_dot.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::backend {
namespace {

// Per-thread scratch: scores (n_ctx floats), then f16 probabilities and the f16 query packed two per float.
size_t scratch_per_thread(int n_ctx, int head_dim) {
  return static_cast<size_t>(n_ctx) + static_cast<size_t>(n_ctx + 1) / 2 +
         static_cast<size_t>(head_dim + 1) / 2;
}

// Work below which a whole attention call stays on the calling thread (multiply-adds).
constexpr int64_t kMinParallelAttention = int64_t{1} << 15;

}  // namespace

void CpuBackend::kv_store(const KvCacheView& kv, Buf<const float> k_buf, Buf<const float> v_buf, int64_t rows,
                          int pos0) {
  const auto timer = timed({"kv_store"});
  if (pos0 < 0 || pos0 + rows > kv.n_ctx)
    fail("kv cache: positions {}..{} do not fit in a context of {}", pos0, pos0 + rows - 1, kv.n_ctx);
  const int64_t row = static_cast<int64_t>(kv.n_head_kv) * kv.head_dim;
  const float* k = detail::raw(k_buf.first(static_cast<size_t>(rows * row)));
  const float* v = detail::raw(v_buf.first(static_cast<size_t>(rows * row)));
  uint16_t* cache_k = detail::raw(kv.k.first(static_cast<size_t>(kv.n_ctx * row)));
  uint16_t* cache_v = detail::raw(kv.v.first(static_cast<size_t>(kv.n_ctx * row)));
  const kernels::QuantizeFn to_f16 = kernels::activation_quantizer(GgmlType::F16, level_);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = pos0 + r;
    to_f16(k + r * row, cache_k + p * row, row);
    for (int64_t i = 0; i < row; ++i) cache_v[i * kv.n_ctx + p] = quant::fp32_to_fp16(v[r * row + i]);
  }
}

size_t CpuBackend::attention_scratch_floats(int n_ctx, int head_dim) const {
  return attention_scratch_floats_for(n_ctx, head_dim, pool_.size());
}

size_t CpuBackend::attention_scratch_floats_for(int n_ctx, int head_dim, int n_threads) {
  return scratch_per_thread(n_ctx, head_dim) * static_cast<size_t>(n_threads);
}

void CpuBackend::attention(const KvCacheView& kv, Buf<const float> q_buf, int64_t rows, int pos0,
                           const AttentionParams& p, Buf<float> out_buf, Buf<float> scratch_buf) {
  const auto timer = timed({"attention", nullptr, 0, 0, rows});
  if (rows <= 0) return;
  const int n_head = p.n_head;
  const size_t q_values = static_cast<size_t>(rows * n_head * kv.head_dim);
  const float* q = detail::raw(q_buf.first(q_values));
  float* out = detail::raw(out_buf.first(q_values));
  const std::span<float> scratch(detail::raw(scratch_buf), scratch_buf.size());
  const size_t cache_values = static_cast<size_t>(kv.n_ctx) * static_cast<size_t>(kv.n_head_kv * kv.head_dim);
  const uint16_t* cache_k = detail::raw(kv.k.first(cache_values));
  const uint16_t* cache_v = detail::raw(kv.v.first(cache_values));
  const float* sinks = p.sinks ? detail::raw(p.sinks.first(static_cast<size_t>(n_head))) : nullptr;
  if (pos0 < 0 || pos0 + rows > kv.n_ctx)
    fail("attention: positions {}..{} do not fit in a context of {}", pos0, pos0 + rows - 1, kv.n_ctx);
  if (kv.n_head_kv <= 0 || n_head <= 0 || n_head % kv.n_head_kv != 0)
    fail("attention: {} query heads cannot share {} KV heads", n_head, kv.n_head_kv);
  if (p.window < 0) fail("attention: window {} must not be negative", p.window);
  const size_t per_thread = scratch_per_thread(kv.n_ctx, kv.head_dim);
  if (scratch.size() < attention_scratch_floats(kv.n_ctx, kv.head_dim))
    fail("attention: scratch of {} floats, {} needed", scratch.size(),
         attention_scratch_floats(kv.n_ctx, kv.head_dim));

  const kernels::VecDotKernels& f16 = kernels::vec_dot_kernels(GgmlType::F16, level_);
  const kernels::QuantizeFn to_f16 = kernels::activation_quantizer(GgmlType::F16, level_);
  const int hd = kv.head_dim, group = n_head / kv.n_head_kv;
  const int64_t k_row = static_cast<int64_t>(kv.n_head_kv) * hd;
  const size_t k_stride = static_cast<size_t>(k_row) * sizeof(uint16_t);
  const size_t v_stride = static_cast<size_t>(kv.n_ctx) * sizeof(uint16_t);
  const float scale = p.scale, softcap = p.softcap;

  // Work of the (row, head) pairs: about 2 · head_dim multiply-adds per visible key.
  const int64_t avg_keys =
      p.window > 0 ? std::min<int64_t>(p.window, pos0 + (rows + 1) / 2) : pos0 + (rows + 1) / 2;
  const int64_t work = rows * n_head * avg_keys * 2 * hd;
  const int64_t grain = work < kMinParallelAttention ? rows * n_head : 1;
  pool_.parallel_parts(rows * n_head, grain, [&](int thread, int64_t begin, int64_t end) {
    float* scores = scratch.data() + per_thread * static_cast<size_t>(thread);
    auto* probs = reinterpret_cast<uint16_t*>(scores + kv.n_ctx);
    auto* q16 = probs + ((kv.n_ctx + 1) / 2) * 2;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / n_head;
      const int h = static_cast<int>(task % n_head), kh = h / group;
      const int64_t at = pos0 + r;  // causal: keys first..at
      const int64_t first = p.window > 0 ? std::max<int64_t>(0, at - p.window + 1) : 0;
      const int64_t n_kv = at - first + 1;
      to_f16(q + (r * n_head + h) * hd, q16, hd);

      f16.gemm(cache_k + first * k_row + static_cast<int64_t>(kh) * hd, k_stride, n_kv, q16, 0, 1, hd, scores,
               0);
      float max = sinks ? sinks[h] : -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n_kv; ++j) {
        scores[j] *= scale;
        if (softcap > 0.0f) scores[j] = softcap * std::tanh(scores[j] / softcap);
        max = std::max(max, scores[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n_kv; ++j) {
        const float e = std::exp(scores[j] - max);
        scores[j] = e;
        sum += static_cast<double>(e);
      }
      if (sinks) sum += static_cast<double>(std::exp(sinks[h] - max));
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < n_kv; ++j) scores[j] *= inv;
      to_f16(scores, probs, n_kv);

      f16.gemm(cache_v + static_cast<int64_t>(kh) * hd * kv.n_ctx + first, v_stride, hd, probs, 0, 1, n_kv,
               out + (r * n_head + h) * hd, 0);
    }
  });
}

}  // namespace df::backend

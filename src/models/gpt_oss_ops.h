#pragma once
// The ops gpt-oss needs that backend.h does not declare yet: YaRN RoPE, attention with per-head sinks and a
// sliding window, llama.cpp's "OAI" SwiGLU, bias rows, and SOFTMAX_WEIGHT routing (top-k of the raw logits,
// softmax over the k chosen). Plain single-threaded CPU functions with llama.cpp's CPU numerics
// (ARCHITECTURES.md 1.3-1.6); they belong in the backend interface (one implementation per backend) and are
// kept here only until the backend owner moves them.
#include <cstdint>
#include <span>

#include "backend/backend.h"

namespace df::models::gpt_oss {

// RoPE of ggml's rope_ext with YaRN (ARCHITECTURES.md 1.4): freq_scale = 1 / factor, ext_factor 0 or 1,
// attn_factor as llama.cpp's context passes it, corrections from beta_fast / beta_slow and n_ctx_orig.
struct RopeParams {
  int n_rot = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int n_ctx_orig = 0;
};

// The attn_factor llama.cpp's context hands to ggml for a YaRN model (llama-context.cpp): mscale(factor) /
// mscale(factor, log_mul) (or mscale(factor) without a log multiplier), divided by ggml's own magnitude
// term so that the net magnitude is mscale, times the GGUF's rope.scaling.attn_factor.
float yarn_attn_factor(float freq_scale, float yarn_log_mul, float rope_attn_factor);

// NeoX RoPE in place on x = rows × n_head × head_dim, row r at position pos[r].
void rope_neox_yarn(float* x, int64_t rows, int n_head, int head_dim, const int32_t* pos,
                    const RopeParams& p);

// Floats of scratch attention_sinks() needs for a cache of n_ctx positions.
size_t attention_scratch_floats(int n_ctx, int head_dim);

// Causal GQA attention of q (rows × n_head × head_dim, row r at position pos0 + r) over the f16 cache, as
// llama.cpp computes it without flash attention: Q rounded to f16 for K·Q, scores scaled in f32; a key at
// position j is visible from position p when j <= p and, with window > 0, p - j < window; softmax with the
// head's sink logit (not scaled) in the max and the denominator only (exp sum in double); probabilities
// rounded to f16 for P·V. sinks may be null (no sinks). out = rows × n_head × head_dim.
void attention_sinks(const backend::KvCacheView& kv, const float* q, int64_t rows, int pos0, int n_head,
                     float scale, const float* sinks, int window, float* out, std::span<float> scratch);

// x[r] += bias for r < rows (n values per row), as ggml_add broadcasts a bias vector.
void add_bias_rows(float* x, const float* bias, int64_t rows, int64_t n);

// ggml_swiglu_oai: y = min(g, limit) · sigmoid(alpha · min(g, limit)) · (clamp(u, -limit, limit) + 1).
void swiglu_oai(const float* gate, const float* up, int64_t n, float alpha, float limit, float* y);

// SOFTMAX_WEIGHT routing over rows × n_expert logits (router bias already added): ids (rows × k) = the k
// largest logits in descending order (lowest id first on an exact tie), weights = softmax over those k
// logits (max subtracted, exp sum in double), neither renormalised nor scaled.
void route_softmax_weight(const float* logits, int64_t rows, int n_expert, int k, int32_t* ids,
                          float* weights);

}  // namespace df::models::gpt_oss

#pragma once
// The operations a model's forward pass is written against (DESIGN.md "Backends"). A model never computes
// anything itself: it calls these, and each backend implements every op once for all models, with the
// numerics of llama.cpp's CPU path (ARCHITECTURES.md 1, 12.10, 13). Activations are row-major float
// arrays (`rows` rows of `n` values); weights stay in their GGUF block formats.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "gguf/ggml_types.h"
#include "quant/q4_0x16.h"

namespace df::backend {

// A weight matrix as GGUF stores it: ggml shape {n_in, n_out}, i.e. n_out rows of n_in values, each row
// `n_in / block_size` consecutive blocks of `type` — or, with packing Q4_0x16, the same bytes repacked 16
// rows at a time (quant/q4_0x16.h), which the matrix products read faster; such a weight is for matmul
// only (get_rows refuses it), and row(r) is meaningful only for r a multiple of 16 (its group's start).
struct Weight {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  quant::RowPacking packing = quant::RowPacking::kNone;

  bool packed() const { return packing != quant::RowPacking::kNone; }
  size_t row_bytes() const { return ggml_row_bytes(type, n_in); }
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_bytes();
  }
};

// The f16 K/V cache of one attention layer, laid out as llama.cpp lays it out without flash attention:
// K by position (k[(pos * n_head_kv + h) * head_dim + d]) and V transposed
// (v[(h * head_dim + d) * n_ctx + pos]), so that both attention products are rows of f16 dot products.
struct KvCacheView {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int n_ctx = 0;
  int n_head_kv = 0;
  int head_dim = 0;
};

// Router probability function (llama.cpp's expert_gating_func ids 1 and 2).
enum class Gating { Softmax = 1, Sigmoid = 2 };

struct RouterParams {
  Gating gating = Gating::Sigmoid;
  int n_expert = 0;
  int k = 0;                              // experts chosen per token
  const float* selection_bias = nullptr;  // n_expert values added to the probabilities to choose (optional)
  bool normalize = true;                  // weights / max(sum, 6.103515625e-5)
  float scale = 1.0f;                     // applied when not 0 and not 1
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int n_threads() const = 0;

  // Whether matmul() takes weights of this block type.
  virtual bool supports_matmul(GgmlType w) const = 0;
  // Bytes of scratch that matmul() needs for `rows` activation rows against a weight of type w, n_in wide.
  virtual size_t matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const = 0;
  // y[r][o] = W[o] · x[r] for r < rows, o < w.n_out. Each activation row is first converted to the weight's
  // vec_dot type (Q8_0, Q8_K, F16, ...) exactly as llama.cpp's CPU matmul does. x and y must not overlap.
  virtual void matmul(const Weight& w, const float* x, int64_t rows, float* y,
                      std::span<uint8_t> scratch) = 0;
  // out[i] = row ids[i] of the table, dequantized exactly (no activation rounding).
  virtual void get_rows(const Weight& table, std::span<const int32_t> ids, float* out) = 0;

  // y = x / sqrt(mean(x²) + eps) per row of n values (sum of squares in double), then ⊙ weight if given.
  // x == y is allowed. Per-head norms are this op over rows * n_head rows of head_dim values.
  virtual void rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps,
                        float* y) = 0;
  // NeoX RoPE in place on x = rows × n_head × head_dim; the first n_rot dims of each head rotate, row r at
  // position pos[r]; θ follows ggml's iterative float recurrence (ARCHITECTURES.md 1.4).
  virtual void rope_neox(float* x, int64_t rows, int n_head, int head_dim, int n_rot, const int32_t* pos,
                         float freq_base, float freq_scale) = 0;

  // Rounds k and v (rows × n_head_kv × head_dim each) to f16 and stores them at positions pos0.. .
  virtual void kv_store(const KvCacheView& kv, const float* k, const float* v, int64_t rows, int pos0) = 0;
  // Scratch floats attention() needs for a cache of n_ctx positions.
  virtual size_t attention_scratch_floats(int n_ctx, int head_dim) const = 0;
  // Causal GQA attention of q (rows × n_head × head_dim, row r at position pos0 + r) over the cache
  // positions 0..pos0 + r, llama.cpp's non-flash path: Q rounded to f16 for K·Q, scores scaled in f32,
  // softmax (sum in double), probabilities rounded to f16 for P·V. out = rows × n_head × head_dim.
  virtual void attention(const KvCacheView& kv, const float* q, int64_t rows, int pos0, int n_head,
                         float scale, float* out, std::span<float> scratch) = 0;

  // LFM2 gated short convolution over `rows` consecutive tokens. bcx = rows × 3n (b | c | x); conv_w =
  // n channels × l_cache taps (tap 0 oldest); state = (l_cache - 1) × n, the previous b⊙x rows, oldest first,
  // advanced in place. y[t] = c ⊙ Σ_j w_j · (b⊙x)_{t - (l_cache-1) + j}, accumulated in float in tap order.
  virtual void short_conv(const float* bcx, int64_t rows, int64_t n, const float* conv_w, int l_cache,
                          float* state, float* y) = 0;

  // y = silu(gate) ⊙ up over n values (y may alias gate or up).
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* y) = 0;
  // x += y over n values.
  virtual void add(float* x, const float* y, int64_t n) = 0;

  // Expert choice for `rows` rows of router logits (rows × n_expert): ids (rows × k) in selection order
  // (descending score, lowest id first on exact ties) and their weights (rows × k), as build_moe_ffn does.
  virtual void route(const RouterParams& p, const float* logits, int64_t rows, int32_t* ids,
                     float* weights) = 0;
  // out[r] = Σ_j weights[r][j] · expert_out[r][j] in slot order (expert_out = rows × k × n).
  virtual void moe_combine(const float* expert_out, const float* weights, int64_t rows, int k, int64_t n,
                           float* out) = 0;
};

}  // namespace df::backend

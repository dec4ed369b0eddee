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

// Router probability function (llama.cpp's expert_gating_func): sigmoid or softmax probabilities, top-k on
// them (plus the selection bias), weights from the probabilities; or SoftmaxWeight (gpt-oss): top-k of the
// raw logits, weights = softmax over the k chosen logits.
enum class Gating { Softmax = 1, Sigmoid = 2, SoftmaxWeight = 3 };

struct RouterParams {
  Gating gating = Gating::Sigmoid;
  int n_expert = 0;
  int k = 0;                              // experts chosen per token
  const float* selection_bias = nullptr;  // n_expert values added to the probabilities to choose (optional)
  bool normalize = true;                  // weights / max(sum, 6.103515625e-5) (Softmax and Sigmoid only)
  float scale = 1.0f;                     // applied when not 0 and not 1 (Softmax and Sigmoid only)
};

// RoPE as ggml's rope_ext computes it (ARCHITECTURES.md 1.4): θ_i = p · base^(-2i/n_rot) by ggml's iterative
// float recurrence, divided by freq_factors[i] when given; YaRN when ext_factor != 0 (ramp between the
// interpolated angle freq_scale · θ and the extrapolated θ over the correction band from beta_fast /
// beta_slow and n_ctx_orig, magnitude 1 + 0.1 ln(1 / freq_scale)); everything scaled by attn_factor.
// NeoX rotates dims (i, i + n_rot/2), Normal rotates adjacent pairs (2i, 2i + 1). Dims past n_rot untouched.
enum class RopeMode { Normal, NeoX };
struct RopeParams {
  RopeMode mode = RopeMode::NeoX;
  int n_rot = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int n_ctx_orig = 0;
  const float* freq_factors = nullptr;  // n_rot / 2 divisors of θ_i (llama3-style rope_freqs), optional
};

// One layer's attention, llama.cpp's non-flash path: scores = (K·Q) · scale (Q rounded to f16), then
// softcap · tanh(score / softcap) when softcap > 0; a key at position j is visible from position p when
// j <= p and, with window > 0, p - j < window; softmax with the head's sink logit (not scaled) in the max and
// the denominator only, when sinks are given (exp sum in double); probabilities rounded to f16 for P·V. The
// head count and size are the layer's own (n_head here, n_head_kv and head_dim in the cache view).
struct AttentionParams {
  int n_head = 0;
  float scale = 1.0f;
  int window = 0;                // 0: every earlier position
  const float* sinks = nullptr;  // n_head logits, optional
  float softcap = 0.0f;          // 0: none
};

// One product of matmul_many: y (rows × w.n_out) = W · x (rows × w.n_in).
struct MatmulTask {
  Weight w;
  const float* x = nullptr;
  float* y = nullptr;
};

// The gated activation of an FFN: SwiGLU silu(g) · u; GeGLU gelu(g) · u (tanh approximation, as ggml_gelu);
// OaiSwiGLU (gpt-oss) min(g, limit) · sigmoid(alpha · min(g, limit)) · (clamp(u, -limit, limit) + 1).
enum class Activation { SwiGLU, GeGLU, OaiSwiGLU };
struct ActivationParams {
  Activation kind = Activation::SwiGLU;
  float alpha = 1.702f;  // OaiSwiGLU
  float limit = 7.0f;    // OaiSwiGLU
};

// One gated FFN of ffn(), applied to n_rows rows of its input:
//   h = act(gate · x + gate_bias, up · x + up_bias),  out = (down · h + down_bias) · out_scale
// for x = input row in_rows[i], written to output row out_rows[i] (i < n_rows). gate and up are n_ff rows
// of n_in values, down n_out rows of n_ff values; biases and the scale are optional (an expert's own).
struct FfnTask {
  Weight gate, up, down;
  const float* gate_bias = nullptr;   // n_ff
  const float* up_bias = nullptr;     // n_ff
  const float* down_bias = nullptr;   // n_out
  float out_scale = 1.0f;             // applied when not 1
  const int32_t* in_rows = nullptr;   // nullptr: row i
  const int32_t* out_rows = nullptr;  // nullptr: row i
  int64_t n_rows = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int n_threads() const = 0;

  // The layout this backend reads a weight of this type and row count fastest in; whoever prepares weight
  // bytes for it (the loader, the expert providers) asks here.
  virtual quant::RowPacking preferred_packing(GgmlType type, int64_t n_out) const = 0;
  // Whether matmul() takes weights of this block type.
  virtual bool supports_matmul(GgmlType w) const = 0;
  // Bytes of scratch that matmul() needs for `rows` activation rows against a weight of type w, n_in wide.
  virtual size_t matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const = 0;
  // y[r][o] = W[o] · x[r] for r < rows, o < w.n_out. Each activation row is first converted to the weight's
  // vec_dot type (Q8_0, Q8_K, F16, ...) exactly as llama.cpp's CPU matmul does. x and y must not overlap.
  virtual void matmul(const Weight& w, const float* x, int64_t rows, float* y,
                      std::span<uint8_t> scratch) = 0;
  // Several products over `rows` activation rows each, as one job (a decode step's products are small; run
  // apart, each would spend more on dispatch than on compute). Each y equals matmul(w, x, rows) bit for bit.
  // At most max_matmul_tasks() products; x and y must not overlap.
  virtual size_t max_matmul_tasks() const = 0;
  virtual void matmul_many(std::span<const MatmulTask> tasks, int64_t rows) = 0;
  // Several gated FFNs over one input x (x_rows rows of n_in), writing rows of out (n_out wide) — the chosen
  // experts of a MoE layer, each on the tokens routed to it, or one dense FFN on every row — as one job.
  // Every FFN must have the same shapes and types; the out rows written must be distinct. Each output row
  // equals matmul(gate), matmul(up), the biases, the activation, matmul(down), its bias and scale on that
  // row, bit for bit.
  virtual void ffn(std::span<const FfnTask> ffns, const ActivationParams& act, const float* x, int64_t x_rows,
                   float* out) = 0;
  // out[i] = row ids[i] of the table, dequantized exactly (no activation rounding).
  virtual void get_rows(const Weight& table, std::span<const int32_t> ids, float* out) = 0;

  // y = x / sqrt(mean(x²) + eps) per row of n values (sum of squares in double), then ⊙ weight if given.
  // x == y is allowed. Per-head norms are this op over rows * n_head rows of head_dim values.
  virtual void rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps,
                        float* y) = 0;
  // RoPE (RopeParams) in place on x = rows × n_head × head_dim, row r at position pos[r].
  virtual void rope(float* x, int64_t rows, int n_head, int head_dim, const int32_t* pos,
                    const RopeParams& p) = 0;

  // Rounds k and v (rows × n_head_kv × head_dim each) to f16 and stores them at positions pos0.. .
  virtual void kv_store(const KvCacheView& kv, const float* k, const float* v, int64_t rows, int pos0) = 0;
  // Scratch floats attention() needs for a cache of n_ctx positions.
  virtual size_t attention_scratch_floats(int n_ctx, int head_dim) const = 0;
  // Attention (AttentionParams) of q (rows × n_head × head_dim, row r at position pos0 + r) over the cache
  // positions visible from it. out = rows × n_head × head_dim.
  virtual void attention(const KvCacheView& kv, const float* q, int64_t rows, int pos0,
                         const AttentionParams& p, float* out, std::span<float> scratch) = 0;

  // LFM2 gated short convolution over `rows` consecutive tokens. bcx = rows × 3n (b | c | x); conv_w =
  // n channels × l_cache taps (tap 0 oldest); state = (l_cache - 1) × n, the previous b⊙x rows, oldest first,
  // advanced in place. y[t] = c ⊙ Σ_j w_j · (b⊙x)_{t - (l_cache-1) + j}, accumulated in float in tap order.
  virtual void short_conv(const float* bcx, int64_t rows, int64_t n, const float* conv_w, int l_cache,
                          float* state, float* y) = 0;

  // y = silu(gate) ⊙ up over n values (y may alias gate or up).
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* y) = 0;
  // x += y over n values.
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // x[r] += bias for r < rows (n values per row), as ggml_add broadcasts a bias vector.
  virtual void add_bias_rows(float* x, const float* bias, int64_t rows, int64_t n) = 0;

  // Expert choice for `rows` rows of router logits (rows × n_expert): ids (rows × k) in selection order
  // (descending score, lowest id first on exact ties) and their weights (rows × k), as build_moe_ffn does.
  virtual void route(const RouterParams& p, const float* logits, int64_t rows, int32_t* ids,
                     float* weights) = 0;
  // out[r] = Σ_j weights[r][j] · expert_out[r][j] in slot order (expert_out = rows × k × n).
  virtual void moe_combine(const float* expert_out, const float* weights, int64_t rows, int k, int64_t n,
                           float* out) = 0;
};

}  // namespace df::backend

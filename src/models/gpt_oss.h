#pragma once
// OpenAI gpt-oss (GGUF architecture `gpt-oss`, ARCHITECTURES.md 7.2-7.4): every layer is GQA attention with
// biases, YaRN NeoX RoPE and one learned sink logit per head, sliding-window on the layers the pattern marks
// (even layers for the default period 2), then experts chosen by the biased router logits, weighted by a
// softmax over the chosen k, each a clamped "OAI" SwiGLU with biases. Untied output head.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "models/moe_model_base.h"

namespace df::models {

struct GptOssConfig {
  std::string name;
  int n_layer = 0, n_embd = 0, n_vocab = 0, n_ctx_train = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  int n_swa = 0;          // sliding window (keys at p - n_swa + 1 .. p are visible)
  std::vector<bool> swa;  // per layer: sliding-window attention (else full)
  float eps = 0;
  backend::RopeParams rope;      // full-attention layers
  backend::RopeParams rope_swa;  // sliding-window layers (rope.freq_base_swa, same scaling)
};

// The config from the GGUF's keys (and token_embd's shape for n_vocab), checked: one head count for every
// layer, head size == rope.dimension_count, a positive window, a RoPE scaling this engine implements.
GptOssConfig gpt_oss_config(const gguf::File& file);

class GptOssModel final : public MoeModelBase {
 public:
  GptOssModel(const gguf::File& file, const LoadOptions& options);

  const GptOssConfig& config() const { return cfg_; }
  std::unique_ptr<ModelState> new_state(int n_ctx) override;

  struct Layer {
    backend::Buf<const float> attn_norm;
    backend::Buf<const float> post_attn_norm;  // the pre-FFN norm
    backend::Weight wq, wk, wv, wo;
    backend::Buf<const float> bq, bk, bv, bo;
    backend::Buf<const float> sinks;  // n_head logits
    backend::Weight router;
    backend::Buf<const float> router_bias;
    // Per-expert biases stay resident (small): {n_ff, n_expert} for gate and up, {n_embd, n_expert} for down.
    backend::Buf<const float> gate_bias, up_bias, down_bias;
  };

 private:
  class State;
  void run_batch(const SequenceBatch& batch, ForwardCapture* capture) override;
  // st: the work state, whose batch buffers hold every sequence's rows.
  void run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture);
  void run_moe(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture);
  void route(State& st, const Layer& l, backend::Buf<const float> x, int64_t T, const RoutingOut& out);

  GptOssConfig cfg_;
  std::vector<Layer> layers_;  // every layer is a MoE layer: MoE index == model layer
};

std::unique_ptr<Model> load_gpt_oss(const gguf::File& file, const LoadOptions& options);

}  // namespace df::models

#pragma once
// Qwen3 MoE (GGUF architecture `qwen3moe`, ARCHITECTURES.md 2): every layer is GQA attention with per-head
// QK-norm and NeoX RoPE, then softmax-routed SwiGLU experts whose top-k weights are renormalised; untied
// output head (token_embd when `output` is absent).
#include <memory>
#include <string>
#include <vector>

#include "models/moe_model_base.h"

namespace df::models {

struct Qwen3MoeConfig {
  std::string name;
  int n_layer = 0, n_embd = 0, n_vocab = 0, n_ctx_train = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  float eps = 0, rope_theta = 0, rope_freq_scale = 1;
  float expert_weights_scale = 0;  // 0 or 1: not applied (llama.cpp's rule)
};

// The config from the GGUF's keys (and token_embd's shape for n_vocab), checked: one head count for every
// layer, key_length == value_length == rope.dimension_count (llama.cpp asserts all three equal).
Qwen3MoeConfig qwen3moe_config(const gguf::File& file);

class Qwen3MoeModel final : public MoeModelBase {
 public:
  Qwen3MoeModel(const gguf::File& file, const LoadOptions& options);

  const Qwen3MoeConfig& config() const { return cfg_; }
  std::unique_ptr<ModelState> new_state(int n_ctx) override;

  struct Layer {
    backend::Buf<const float> attn_norm;
    backend::Buf<const float> ffn_norm;
    backend::Weight wq, wk, wv, wo;
    backend::Buf<const float> q_norm;
    backend::Buf<const float> k_norm;
    backend::Weight router;
  };

 private:
  using State = UniformKvState<Qwen3MoeModel>;
  void run_batch(const SequenceBatch& batch, ForwardCapture* capture) override;
  // st: the work state, whose batch buffers hold every sequence's rows.
  void run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture);
  void run_moe(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture);
  void route(State& st, int il, int64_t T, const RoutingOut& out);
  backend::RouterParams router_params() const;

  Qwen3MoeConfig cfg_;
  std::vector<Layer> layers_;  // every layer is a MoE layer: MoE index == model layer
};

std::unique_ptr<Model> load_qwen3moe(const gguf::File& file, const LoadOptions& options);

}  // namespace df::models

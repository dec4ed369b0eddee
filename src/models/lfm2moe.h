#pragma once
// Liquid LFM2 MoE (GGUF architecture `lfm2moe`, ARCHITECTURES.md 3): gated short-conv and GQA attention
// layers, leading dense SwiGLU layers, then sigmoid-routed SwiGLU experts with a selection bias; tied head
// with token_embd_norm as the final norm.
#include <memory>
#include <string>
#include <vector>

#include "models/moe_model_base.h"

namespace df::models {

struct Lfm2MoeConfig {
  std::string name;
  int n_layer = 0, n_embd = 0, n_vocab = 0, n_ctx_train = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  std::vector<bool> attn;     // per layer: attention (else short conv)
  std::vector<int64_t> n_ff;  // per layer: dense FFN width (used by the leading dense layers)
  int n_dense_lead = 0;
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  int l_cache = 0;  // short-conv taps
  float eps = 0, rope_theta = 0, rope_freq_scale = 1;
};

// The config from the GGUF's keys (and token_embd's shape for n_vocab), with the checks the engine relies
// on: sigmoid gating, one KV head count for every attention layer, consistent head sizes.
Lfm2MoeConfig lfm2moe_config(const gguf::File& file);

class Lfm2MoeModel final : public MoeModelBase {
 public:
  Lfm2MoeModel(const gguf::File& file, const LoadOptions& options);

  const Lfm2MoeConfig& config() const { return cfg_; }
  std::unique_ptr<ModelState> new_state(int n_ctx) override;

  struct Layer {
    backend::Buf<const float> attn_norm;
    backend::Buf<const float> ffn_norm;
    // attention
    backend::Weight wq, wk, wv, wo;
    backend::Buf<const float> q_norm;
    backend::Buf<const float> k_norm;
    // short conv
    backend::Weight in_proj, out_proj;
    backend::Buf<const float> conv;  // {l_cache, n_embd}
    // dense FFN
    backend::Weight ffn_gate, ffn_up, ffn_down;
    // MoE
    backend::Weight router;
    backend::Buf<const float> selection_bias;
    int moe_index = -1;
  };

 private:
  class State;
  void run_batch(const SequenceBatch& batch, ForwardCapture* capture) override;
  // st: the work state, whose batch buffers hold every sequence's rows.
  void run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture);
  void run_moe(State& st, const SequenceBatch& batch, const Layer& layer, ForwardCapture* capture);
  void route(State& st, const Layer& layer, int64_t T, const RoutingOut& out);
  backend::RouterParams router_params(const Layer& layer) const;

  Lfm2MoeConfig cfg_;
  std::vector<Layer> layers_;
};

std::unique_ptr<Model> load_lfm2moe(const gguf::File& file, const LoadOptions& options);

}  // namespace df::models

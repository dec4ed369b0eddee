#pragma once
// Tencent Hy3 / Hunyuan 3 (GGUF architecture `hy_v3`, ARCHITECTURES.md 6): every layer is GQA attention with
// per-head QK-norm and NeoX RoPE (qwen3moe's); a layer without a router (`ffn_gate_inp`) has a dense SwiGLU
// FFN, every other one sigmoid-routed SwiGLU experts with a selection bias (`exp_probs_b`), renormalised and
// scaled weights, and an always-on shared expert whose output is added to the routed sum before the residual.
// Trailing multi-token-prediction blocks (`nextn_predict_layers`) are not run.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "models/moe_model_base.h"

namespace df::models {

struct HyV3Config {
  std::string name;
  int n_layer = 0;  // the layers run: block_count less the trailing MTP blocks
  int n_nextn = 0;  // trailing MTP blocks in the file (blk.n_layer ..), skipped
  int n_embd = 0, n_vocab = 0, n_ctx_train = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  std::vector<bool> moe;  // per layer: routed experts (else the dense FFN); from ffn_gate_inp's presence
  int64_t n_ff = 0;       // dense FFN width (feed_forward_length), when a layer is dense
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  int64_t n_ff_shexp = 0;  // shared expert width (default: n_ff_exp)
  backend::Gating gating = backend::Gating::Sigmoid;
  bool weights_norm = false;       // expert_weights_norm (llama.cpp's default when absent: false)
  float expert_weights_scale = 0;  // 0 or 1: not applied (llama.cpp's rule)
  float eps = 0, rope_theta = 0, rope_freq_scale = 1;
};

// The config from the GGUF's keys and which layers have a router, checked as llama.cpp checks them (key and
// value lengths equal to the rotated dims, an expert width present).
HyV3Config hy_v3_config(const gguf::File& file);

class HyV3Model final : public MoeModelBase {
 public:
  HyV3Model(const gguf::File& file, const LoadOptions& options);

  const HyV3Config& config() const { return cfg_; }
  std::unique_ptr<ModelState> new_state(int n_ctx) override;

  struct Layer {
    backend::Buf<const float> attn_norm;
    backend::Buf<const float> ffn_norm;
    backend::Weight wq, wk, wv, wo;
    backend::Buf<const float> q_norm;
    backend::Buf<const float> k_norm;
    // dense FFN (layers without a router)
    backend::Weight ffn_gate, ffn_up, ffn_down;
    // MoE
    backend::Weight router;
    backend::Buf<const float> selection_bias;  // absent: choice by the probabilities alone
    backend::Weight shared_gate, shared_up, shared_down;
    int moe_index = -1;
  };

 private:
  using State = UniformKvState<HyV3Model>;
  void run_batch(const SequenceBatch& batch, ForwardCapture* capture) override;
  // st: the work state, whose batch buffers hold every sequence's rows.
  void run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture);
  void run_moe(State& st, const SequenceBatch& batch, const Layer& layer, ForwardCapture* capture);
  void route(State& st, const Layer& layer, int64_t T, const RoutingOut& out);
  backend::RouterParams router_params(const Layer& layer) const;

  HyV3Config cfg_;
  std::vector<Layer> layers_;
};

std::unique_ptr<Model> load_hy_v3(const gguf::File& file, const LoadOptions& options);

}  // namespace df::models

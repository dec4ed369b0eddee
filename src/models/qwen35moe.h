#pragma once
// Qwen3.5 / Qwen3.6 MoE (GGUF architecture `qwen35moe`, ARCHITECTURES.md 5): three of every four layers are
// gated delta-net layers (a short causal conv, L2-normalised q/k, the gated delta rule per head with its own
// recurrent matrix, an RMS-normed SiLU-gated output), every fourth full attention with per-head QK-norm,
// partial NeoX RoPE (IMRoPE for text) and a sigmoid output gate; every layer has softmax-routed SwiGLU
// experts plus a shared expert scaled by a sigmoid gate of its own. Trailing multi-token-prediction blocks
// (`nextn_predict_layers`) are not run.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "models/moe_model_base.h"

namespace df::models {

struct Qwen35MoeConfig {
  std::string name;
  int n_layer = 0;  // the layers run: block_count less the trailing MTP blocks
  int n_nextn = 0;  // trailing MTP blocks in the file (blk.n_layer ..), skipped
  int n_embd = 0, n_vocab = 0, n_ctx_train = 0;
  std::vector<bool> recurrent;  // per layer: a delta-net layer (else full attention)
  // attention layers
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  float attn_scale = 0;  // attention.scale; 0: 1/sqrt(head_dim)
  // delta-net layers
  int conv_taps = 0;               // ssm.conv_kernel
  int dn_k_heads = 0;              // ssm.group_count
  int dn_v_heads = 0;              // ssm.time_step_rank
  int dn_head_dim = 0;             // ssm.state_size (= inner_size / time_step_rank)
  int64_t conv_channels() const {  // q, k and v heads
    return int64_t{2} * dn_k_heads * dn_head_dim + int64_t{dn_v_heads} * dn_head_dim;
  }
  // MoE
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  int64_t n_ff_shexp = 0;          // shared expert width (default: n_ff_exp)
  float expert_weights_scale = 0;  // 0 or 1: not applied (llama.cpp's rule)
  float eps = 0, rope_theta = 0;
};

// The config from the GGUF's keys, checked as llama.cpp checks them (the rope sections present, the V heads a
// multiple of the K heads, key and value head sizes equal).
Qwen35MoeConfig qwen35moe_config(const gguf::File& file);

class Qwen35MoeModel final : public MoeModelBase {
 public:
  Qwen35MoeModel(const gguf::File& file, const LoadOptions& options);

  const Qwen35MoeConfig& config() const { return cfg_; }
  std::unique_ptr<ModelState> new_state(int n_ctx) override;

  struct Layer {
    backend::Buf<const float> attn_norm;
    backend::Buf<const float> ffn_norm;  // post_attention_norm: the pre-FFN norm
    // full attention: attn_q's rows split into the query heads and their output gates
    backend::Weight wq, wq_gate, wk, wv, wo;
    backend::Buf<const float> q_norm, k_norm;
    // delta-net
    backend::Weight qkv, z, ssm_beta, ssm_alpha, ssm_out;
    backend::Buf<const float> conv, dt_bias, ssm_a, ssm_norm;
    // MoE and the gated shared expert
    backend::Weight router;
    backend::Weight shared_gate, shared_up, shared_down, shared_gate_inp;
    int moe_index = -1;
  };

  class State;

 private:
  void run_batch(const SequenceBatch& batch, ForwardCapture* capture) override;
  void run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture);
  void run_attention(State& st, const SequenceBatch& batch, const Layer& l, int il);
  void run_delta_net(State& st, const SequenceBatch& batch, const Layer& l, int il);
  void run_moe(State& st, const SequenceBatch& batch, const Layer& layer, ForwardCapture* capture);
  void route(State& st, const Layer& layer, int64_t T, const RoutingOut& out);
  backend::RouterParams router_params() const;

  Qwen35MoeConfig cfg_;
  std::vector<Layer> layers_;
};

// The bytes per token of the batch buffers a qwen35moe state adds to the shared ones (state_size.cpp).
size_t qwen35moe_extra_bytes_per_token(const Qwen35MoeConfig& c);

std::unique_ptr<Model> load_qwen35moe(const gguf::File& file, const LoadOptions& options);

}  // namespace df::models

#pragma once
// Google Gemma 4 MoE (GGUF architecture `gemma4`, ARCHITECTURES.md 4; flagship Gemma 4 26B-A4B): sliding and
// global attention layers with their own head sizes, KV head counts, RoPE bases and rotary dims (global
// layers divide θ by `rope_freqs`, and may take V from the K projection), attention scale 1, per-head Q/K
// norms and a weightless V norm, a norm after attention; then a dense GeGLU branch beside softmax-routed
// GeGLU experts whose router reads its own scaled norm of the stream and whose outputs carry a per-expert
// scale, each branch normed, their sum normed, the residual, and an optional per-layer output scale. The
// embedding is scaled by √H, the head is tied, and the logits are soft-capped. Per-layer embeddings (E2B/E4B)
// and shared-KV layers are not supported (refused at load).
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "models/moe_model_base.h"

namespace df::models {

struct Gemma4Config {
  std::string name;
  int n_layer = 0, n_embd = 0, n_vocab = 0, n_ctx_train = 0;
  int n_head = 0;
  std::vector<bool> swa;       // per layer: sliding window (else global)
  std::vector<int> n_head_kv;  // per layer
  std::vector<int> head_dim;   // per layer (key_length_swa on sliding layers, key_length on global)
  std::vector<int> n_rot;      // per layer
  std::vector<int64_t> n_ff;   // per layer: the dense GeGLU branch
  std::vector<bool> moe;       // per layer: routed experts (a router, ffn_gate_inp)
  int n_swa = 0;               // sliding window
  int n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  float eps = 0;
  float rope_theta = 0, rope_theta_swa = 0, rope_freq_scale = 1;
  float final_logit_softcap = 30;  // 0: none; llama.cpp reads an absent key as 30
  int max_head_dim() const;
  int64_t max_q_dim() const;   // n_head · the widest head
  int64_t max_kv_dim() const;  // the widest KV row of any layer
};

// The config from the GGUF's keys and which layers have a router, checked as llama.cpp checks them, refusing
// what this engine does not implement (per-layer embeddings, shared KV layers).
Gemma4Config gemma4_config(const gguf::File& file);

class Gemma4Model final : public MoeModelBase {
 public:
  Gemma4Model(const gguf::File& file, const LoadOptions& options);

  const Gemma4Config& config() const { return cfg_; }
  std::unique_ptr<ModelState> new_state(int n_ctx) override;

  struct Layer {
    backend::Buf<const float> attn_norm, post_attn_norm;
    backend::Weight wq, wk, wv;  // wv absent on K-equals-V (global) layers
    backend::Weight wo;
    backend::Buf<const float> q_norm, k_norm;
    backend::Buf<const float> out_scale_buf;  // layer_output_scale {1}, optional
    float out_scale = 1;                      // its value (1 when absent)
    // dense GeGLU branch (every layer)
    backend::Buf<const float> ffn_norm, ffn_post_norm;
    backend::Weight ffn_gate, ffn_up, ffn_down;
    // MoE branch
    backend::Buf<const float> post_norm_1, pre_norm_2, post_norm_2;
    backend::Weight router;
    backend::Buf<const float> router_scale;  // ffn_gate_inp.scale {H}
    backend::Buf<const float> down_scale;    // ffn_down_exps.scale {n_expert}
    std::vector<float> down_scale_host;      // the same, on the host (the host-grouped expert path)
    int moe_index = -1;
  };

 private:
  class State;
  void run_batch(const SequenceBatch& batch, ForwardCapture* capture) override;
  // st: the work state, whose batch buffers hold every sequence's rows.
  void run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture);
  void attention(State& st, const SequenceBatch& batch, int il);
  void run_moe(State& st, const SequenceBatch& batch, const Layer& layer, ForwardCapture* capture);
  // The router of `layer` on the stream x (rms-normed without weight, × 1/√H, ⊙ its input scale, into
  // out.xn), then the choice and weights of its k experts.
  void route(State& st, const Layer& layer, backend::Buf<const float> x, int64_t T, const RoutingOut& out);

  Gemma4Config cfg_;
  std::vector<Layer> layers_;
  backend::Buf<const float> rope_freqs_;  // global layers' θ divisors (n_rot / 2), optional
};

std::unique_ptr<Model> load_gemma4(const gguf::File& file, const LoadOptions& options);

}  // namespace df::models

// qwen3moe forward pass (ARCHITECTURES.md 2.3), written against the backend ops. One batch of T tokens goes
// through every layer together; each MoE layer routes all T tokens, then acquires each chosen expert once
// and applies it to the tokens routed to it, a wave of k experts at a time (moe_block.h). All buffers live
// in the state and grow only when a batch is larger than any before, so decoding allocates nothing.
#include "models/qwen3moe.h"

#include "models/model_common.h"
#include "models/moe_block.h"
#include "models/sequence_state.h"

namespace df::models {

std::unique_ptr<ModelState> Qwen3MoeModel::new_state(int n_ctx) {
  check_n_ctx(n_ctx);
  return std::make_unique<State>(*this, *backend_, n_ctx, max_act_row_bytes_);
}

void Qwen3MoeModel::run_batch(const SequenceBatch& batch, ForwardCapture* capture) {
  run_layers<State>(batch, capture, &Qwen3MoeModel::run_layer);
}

backend::RouterParams Qwen3MoeModel::router_params() const {
  backend::RouterParams p;
  p.gating = backend::Gating::Softmax;
  p.n_expert = cfg_.n_expert;
  p.k = cfg_.n_expert_used;
  p.normalize = true;  // qwen3moe renormalises the top-k weights (build_moe_ffn norm_w = true)
  p.scale = cfg_.expert_weights_scale;
  return p;
}

void Qwen3MoeModel::run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  // The attention norms x (attn_norm) into xn as part of its Q/K/V products.
  qk_norm_attention(
      *backend_,
      QkNormAttention{l.wq, l.wk, l.wv, l.wo, l.q_norm, l.k_norm, cfg_.n_head, cfg_.n_head_kv, cfg_.head_dim,
                      cfg_.head_dim, cfg_.eps, cfg_.rope_theta, cfg_.rope_freq_scale},
      batch, il, l.attn_norm);

  run_moe(st, batch, il, capture);
}

// ffn_norm(x) into xn, then layer il's router: the k experts of every token and their weights.
void Qwen3MoeModel::route(State& st, int il, int64_t T, const RoutingOut& out) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  const backend::RouterParams params = router_params();
  route_normed(*backend_, RouterInputs{params, l.ffn_norm, cfg_.eps, l.router}, st.trunk.x.view(), T,
               cfg_.n_embd, st.trunk.scratch.view(), out);
}

// Every layer is a MoE layer, so the MoE index is the model layer.
void Qwen3MoeModel::run_moe(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture) {
  MoeBuffers& m = st.moe;
  const int64_t T = batch.T;
  const int K = cfg_.n_expert_used;
  route_with_read_ahead(m, il, T, st.trunk.xn.view(),
                        [&](int target, const RoutingOut& out) { route(st, target, T, out); });
  const backend::ActivationParams swiglu;
  const ExpertBiases none;
  add_experts(*backend_, *experts_, il, m, st.wave,
              {swiglu, none, K, cfg_.n_expert, cfg_.n_embd, cfg_.n_ff_exp}, st.trunk.xn.view(), T,
              st.trunk.x.view());
  report_moe(m, il, batch, capture);
}

}  // namespace df::models

// hy_v3 forward pass (ARCHITECTURES.md 6.3), written against the backend ops. One batch of T tokens (of one
// sequence or several, each through its own KV cache) goes through every layer together; each MoE layer
// routes all T tokens, then acquires each chosen expert once and applies it to the tokens routed to it
// (moe_block.h), beside the shared expert, which every token goes through. All buffers live in the state and
// grow only when a batch is larger than any before, so decoding allocates nothing.
#include "models/hy_v3.h"

#include "models/model_common.h"
#include "models/moe_block.h"
#include "models/sequence_state.h"

namespace df::models {

std::unique_ptr<ModelState> HyV3Model::new_state(int n_ctx) {
  check_n_ctx(n_ctx);
  return std::make_unique<State>(*this, *backend_, n_ctx, max_act_row_bytes_);
}

void HyV3Model::run_batch(const SequenceBatch& batch, ForwardCapture* capture) {
  run_layers<State>(batch, capture, &HyV3Model::run_layer);
}

backend::RouterParams HyV3Model::router_params(const Layer& layer) const {
  backend::RouterParams p;
  p.gating = cfg_.gating;
  p.n_expert = cfg_.n_expert;
  p.k = cfg_.n_expert_used;
  p.selection_bias = layer.selection_bias;
  p.normalize = cfg_.weights_norm;
  p.scale = cfg_.expert_weights_scale;
  return p;
}

void HyV3Model::run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  TrunkBuffers& ws = st.trunk;
  const int64_t T = batch.T;
  const int64_t H = cfg_.n_embd;
  backend::Backend& be = *backend_;

  // The attention norms x (attn_norm) into xn as part of its Q/K/V products.
  qk_norm_attention(
      *backend_,
      QkNormAttention{l.wq, l.wk, l.wv, l.wo, l.q_norm, l.k_norm, cfg_.n_head, cfg_.n_head_kv, cfg_.head_dim,
                      cfg_.head_dim, cfg_.eps, cfg_.rope_theta, cfg_.rope_freq_scale},
      batch, il, l.attn_norm);

  if (l.moe_index >= 0) {
    run_moe(st, batch, l, capture);
    return;
  }
  read_ahead_from_dense_layer(st.moe, il, T, [&](int target, const RoutingOut& out) {
    route(st, layers_[static_cast<size_t>(moe_model_layer(target))], T, out);
  });
  be.rms_norm(ws.x.view(), T, H, l.ffn_norm, cfg_.eps, ws.xn.view());
  dense_ffn(be, l.ffn_gate, l.ffn_up, l.ffn_down, backend::ActivationParams{}, ws.xn.view(), T,
            ws.mix.view());
  be.add(ws.x.view(), ws.mix.view(), T * H);
}

// ffn_norm(x) into xn, then the layer's router: the k experts of every token and their weights.
void HyV3Model::route(State& st, const Layer& l, int64_t T, const RoutingOut& out) {
  const backend::RouterParams params = router_params(l);
  route_normed(*backend_, RouterInputs{params, l.ffn_norm, cfg_.eps, l.router}, st.trunk.x.view(), T,
               cfg_.n_embd, st.trunk.scratch.view(), out);
}

void HyV3Model::run_moe(State& st, const SequenceBatch& batch, const Layer& l, ForwardCapture* capture) {
  MoeBuffers& m = st.moe;
  TrunkBuffers& ws = st.trunk;
  const int64_t T = batch.T, H = cfg_.n_embd;
  const int K = cfg_.n_expert_used, moe = l.moe_index;
  // The guesses use the post-attention state, before this layer's FFN.
  route_with_read_ahead(m, moe, T, ws.xn.view(), [&](int target, const RoutingOut& out) {
    route(st, layers_[static_cast<size_t>(moe_model_layer(target))], T, out);
  });
  const backend::ActivationParams swiglu;
  const ExpertBiases none;
  // The shared output into mix, the routed experts' weighted sum added onto it, then mix into x.
  shared_expert(*backend_, ws, SharedExpert{l.shared_gate, l.shared_up, l.shared_down}, T, H);
  add_experts(*backend_, *experts_, moe, m, st.wave, {swiglu, none, K, cfg_.n_expert, H, cfg_.n_ff_exp},
              ws.xn.view(), T, ws.mix.view());
  backend_->add(ws.x.view(), ws.mix.view(), T * H);
  report_moe(m, moe, batch, capture);
}

}  // namespace df::models

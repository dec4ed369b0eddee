// lfm2moe forward pass (ARCHITECTURES.md 3.3), written against the backend ops. One batch of T tokens (of one
// sequence or several, each through its own attention and conv state) goes through every layer together; each
// MoE layer routes all T tokens, then acquires each chosen expert once and applies it to the tokens routed to
// it, a wave of experts at a time (moe_block.h). All buffers live in the state and grow only when a batch is
// larger than any before, so decoding allocates nothing.
#include "models/lfm2moe.h"

#include <algorithm>

#include "models/model_common.h"
#include "models/moe_block.h"
#include "models/sequence_state.h"

namespace df::models {

class Lfm2MoeModel::State final : public MoeSequenceState {
 public:
  State(const Lfm2MoeModel& model, int n_ctx)
      : MoeSequenceState(model, *model.backend_, n_ctx, layer_states(model.cfg_), model.cfg_.head_dim) {}

  // Attention layers keep a KV cache, the others the short convolution's last l_cache - 1 rows.
  static std::vector<LayerStateSpec> layer_states(const Lfm2MoeConfig& c) {
    std::vector<LayerStateSpec> specs;
    for (size_t il = 0; il < static_cast<size_t>(c.n_layer); ++il)
      specs.push_back(c.attn[il] ? LayerStateSpec::kv(c.n_head_kv, c.head_dim)
                                 : LayerStateSpec::conv(c.l_cache, c.n_embd));
    return specs;
  }

  size_t bytes() const override {
    size_t total = MoeSequenceState::bytes();
    for (const auto* b : {&y, &bcx}) total += b->bytes();
    return total + wave.bytes();
  }

  // Grows the batch buffers to hold T tokens (no-op when they already do).
  void reserve(int64_t T) {
    if (!batch_too_small(T)) return;
    const auto& c = model().cfg_;
    const size_t t = static_cast<size_t>(T), H = static_cast<size_t>(c.n_embd);
    grow_batch(T, BatchDims{H, static_cast<size_t>(c.n_head) * static_cast<size_t>(c.head_dim),
                            static_cast<size_t>(c.n_head_kv) * static_cast<size_t>(c.head_dim),
                            static_cast<size_t>(c.n_expert), static_cast<size_t>(c.n_expert_used),
                            model().max_act_row_bytes_});
    y.resize(be, t * H, "short-conv batch buffers");
    bcx.resize(be, t * 3 * H, "short-conv batch buffers");
    wave.reserve(static_cast<size_t>(c.n_expert_used), static_cast<size_t>(c.n_expert));
    batch_grown(T);
  }

  const Lfm2MoeModel& model() const { return static_cast<const Lfm2MoeModel&>(*owner()); }
  DeviceArray<float> y, bcx;  // short-conv batch buffers
  ExpertWave wave;
};

std::unique_ptr<ModelState> Lfm2MoeModel::new_state(int n_ctx) {
  check_n_ctx(n_ctx);
  return std::make_unique<State>(*this, n_ctx);
}

void Lfm2MoeModel::run_batch(const SequenceBatch& batch, ForwardCapture* capture) {
  run_layers<State>(batch, capture, &Lfm2MoeModel::run_layer);
}

backend::RouterParams Lfm2MoeModel::router_params(const Layer& layer) const {
  backend::RouterParams p;
  p.gating = backend::Gating::Sigmoid;
  p.n_expert = cfg_.n_expert;
  p.k = cfg_.n_expert_used;
  p.selection_bias = layer.selection_bias;
  p.normalize = true;
  p.scale = 1.0f;  // llama.cpp applies no expert weight scale to lfm2moe
  return p;
}

void Lfm2MoeModel::run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  TrunkBuffers& ws = st.trunk;
  const int64_t T = batch.T;
  const int64_t H = cfg_.n_embd;
  backend::Backend& be = *backend_;

  // Both mixers norm x (attn_norm) into xn as part of their first products.
  if (cfg_.attn[static_cast<size_t>(il)]) {
    qk_norm_attention(
        *backend_,
        QkNormAttention{l.wq, l.wk, l.wv, l.wo, l.q_norm, l.k_norm, cfg_.n_head, cfg_.n_head_kv,
                        cfg_.head_dim, cfg_.n_rot, cfg_.eps, cfg_.rope_theta, cfg_.rope_freq_scale},
        batch, il, l.attn_norm);
  } else {
    const backend::MatmulTask in_proj{l.in_proj, ws.xn.view(), st.bcx.view()};
    be.norm_matmul_many(ws.x.view(), T, H, l.attn_norm, cfg_.eps, ws.xn.view(), std::span(&in_proj, 1));
    // Each sequence's rows through its own conv state.
    for (const BatchSegment& s : batch.segments) {
      const size_t r0 = static_cast<size_t>(s.row0 * H), n = static_cast<size_t>(s.rows * H);
      be.short_conv(st.bcx.view().sub(3 * r0, 3 * n), s.rows, H, l.conv, cfg_.l_cache,
                    s.state->layers.conv(il), st.y.view().sub(r0, n));
    }
    be.matmul_add(l.out_proj, st.y.view(), T, ws.mix.view(), ws.x.view(), ws.scratch.view());
  }

  if (l.moe_index < 0) {
    read_ahead_from_dense_layer(st.moe, il, T, [&](int target, const RoutingOut& out) {
      route(st, layers_[static_cast<size_t>(moe_model_layer(target))], T, out);
    });
    be.rms_norm(ws.x.view(), T, H, l.ffn_norm, cfg_.eps, ws.xn.view());
    dense_ffn(be, l.ffn_gate, l.ffn_up, l.ffn_down, backend::ActivationParams{}, ws.xn.view(), T,
              ws.mix.view());
    be.add(ws.x.view(), ws.mix.view(), T * H);
  } else {
    run_moe(st, batch, l, capture);
  }
}

// ffn_norm(x) into xn, then the layer's router: the k experts of every token and their weights.
void Lfm2MoeModel::route(State& st, const Layer& l, int64_t T, const RoutingOut& out) {
  const backend::RouterParams params = router_params(l);
  route_normed(*backend_, RouterInputs{params, l.ffn_norm, cfg_.eps, l.router}, st.trunk.x.view(), T,
               cfg_.n_embd, st.trunk.scratch.view(), out);
}

void Lfm2MoeModel::run_moe(State& st, const SequenceBatch& batch, const Layer& l, ForwardCapture* capture) {
  MoeBuffers& m = st.moe;
  const int64_t T = batch.T;
  const int K = cfg_.n_expert_used, moe = l.moe_index;
  // The guesses use the post-operator state, before this layer's FFN.
  route_with_read_ahead(m, moe, T, st.trunk.xn.view(), [&](int target, const RoutingOut& out) {
    route(st, layers_[static_cast<size_t>(moe_model_layer(target))], T, out);
  });
  const backend::ActivationParams swiglu;
  const ExpertBiases none;
  add_experts(*backend_, *experts_, moe, m, st.wave,
              {swiglu, none, K, cfg_.n_expert, cfg_.n_embd, cfg_.n_ff_exp}, st.trunk.xn.view(), T,
              st.trunk.x.view());
  report_moe(m, moe, batch, capture);
}

}  // namespace df::models

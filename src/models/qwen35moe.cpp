// qwen35moe forward pass (ARCHITECTURES.md 5.3-5.5), written against the backend ops. One batch of T tokens
// (of one sequence or several, each through its own KV cache or delta-net state) goes through every layer
// together; each MoE layer routes all T tokens, then acquires each chosen expert once and applies it to the
// tokens routed to it (moe_block.h), beside the gated shared expert. All buffers live in the state and grow
// only when a batch is larger than any before, so decoding allocates nothing.
#include "models/qwen35moe.h"

#include <algorithm>

#include "models/model_common.h"
#include "models/moe_block.h"
#include "models/sequence_state.h"

namespace df::models {

class Qwen35MoeModel::State final : public MoeSequenceState {
 public:
  State(const Qwen35MoeModel& model, int n_ctx)
      : MoeSequenceState(model, *model.backend_, n_ctx, layer_states(model.cfg_), model.cfg_.head_dim) {}

  // Attention layers keep a KV cache, delta-net layers their conv rows and recurrent matrices.
  static std::vector<LayerStateSpec> layer_states(const Qwen35MoeConfig& c) {
    std::vector<LayerStateSpec> specs;
    for (size_t il = 0; il < static_cast<size_t>(c.n_layer); ++il)
      specs.push_back(c.recurrent[il] ? LayerStateSpec::delta_net(c.conv_taps, c.conv_channels(),
                                                                  c.dn_v_heads, c.dn_head_dim, c.dn_head_dim)
                                      : LayerStateSpec::kv(c.n_head_kv, c.head_dim));
    return specs;
  }

  // Floats per token of the buffers below.
  static size_t floats_per_token(const Qwen35MoeConfig& c) {
    const size_t C = static_cast<size_t>(c.conv_channels()), nv = static_cast<size_t>(c.dn_v_heads);
    const size_t v_dim = nv * static_cast<size_t>(c.dn_head_dim);
    return gate_width(c) + 2 * C + 2 * nv + v_dim + 1;
  }
  // The attention output gate (n_head · head_dim) or the delta-net's z (value heads' dims) share a buffer.
  static size_t gate_width(const Qwen35MoeConfig& c) {
    return std::max(static_cast<size_t>(c.n_head) * static_cast<size_t>(c.head_dim),
                    static_cast<size_t>(c.dn_v_heads) * static_cast<size_t>(c.dn_head_dim));
  }

  size_t bytes() const override {
    size_t total = MoeSequenceState::bytes();
    for (const auto* b : {&gate, &u, &conv_out, &alpha, &beta, &dn_out, &shared_gate}) total += b->bytes();
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
    const size_t C = static_cast<size_t>(c.conv_channels()), nv = static_cast<size_t>(c.dn_v_heads);
    const char* what = "qwen35moe batch buffers";
    gate.resize(be, t * gate_width(c), what);
    u.resize(be, t * C, what);
    conv_out.resize(be, t * C, what);
    alpha.resize(be, t * nv, what);
    beta.resize(be, t * nv, what);
    dn_out.resize(be, t * nv * static_cast<size_t>(c.dn_head_dim), what);
    shared_gate.resize(be, t, what);
    wave.reserve(static_cast<size_t>(c.n_expert_used), static_cast<size_t>(c.n_expert));
    batch_grown(T);
  }

  const Qwen35MoeModel& model() const { return static_cast<const Qwen35MoeModel&>(*owner()); }
  DeviceArray<float> gate, u, conv_out, alpha, beta, dn_out, shared_gate;
  ExpertWave wave;
};

size_t qwen35moe_extra_bytes_per_token(const Qwen35MoeConfig& c) {
  return Qwen35MoeModel::State::floats_per_token(c) * sizeof(float);
}

std::unique_ptr<ModelState> Qwen35MoeModel::new_state(int n_ctx) {
  check_n_ctx(n_ctx);
  return std::make_unique<State>(*this, n_ctx);
}

void Qwen35MoeModel::run_batch(const SequenceBatch& batch, ForwardCapture* capture) {
  run_layers<State>(batch, capture, &Qwen35MoeModel::run_layer);
}

backend::RouterParams Qwen35MoeModel::router_params() const {
  backend::RouterParams p;
  p.gating = backend::Gating::Softmax;
  p.n_expert = cfg_.n_expert;
  p.k = cfg_.n_expert_used;
  p.normalize = true;
  p.scale = cfg_.expert_weights_scale;
  return p;
}

void Qwen35MoeModel::run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  TrunkBuffers& ws = st.trunk;
  const int64_t T = batch.T, H = cfg_.n_embd;
  backend_->rms_norm(ws.x.view(), T, H, l.attn_norm, cfg_.eps, ws.xn.view());
  // Each mixer adds its output projection to x.
  if (cfg_.recurrent[static_cast<size_t>(il)])
    run_delta_net(st, batch, l, il);
  else
    run_attention(st, batch, l, il);
  run_moe(st, batch, l, capture);
}

void Qwen35MoeModel::run_attention(State& st, const SequenceBatch& batch, const Layer& l, int il) {
  QkNormAttention a{l.wq,        l.wk,           l.wv,          l.wo,       l.q_norm, l.k_norm,
                    cfg_.n_head, cfg_.n_head_kv, cfg_.head_dim, cfg_.n_rot, cfg_.eps, cfg_.rope_theta,
                    1.0f};
  a.scale = cfg_.attn_scale;
  a.wgate = &l.wq_gate;
  a.gate = st.gate.view();
  qk_norm_attention(*backend_, a, batch, il);
}

void Qwen35MoeModel::run_delta_net(State& st, const SequenceBatch& batch, const Layer& l, int il) {
  backend::Backend& be = *backend_;
  TrunkBuffers& ws = st.trunk;
  const int64_t T = batch.T, C = cfg_.conv_channels(), nv = cfg_.dn_v_heads, d = cfg_.dn_head_dim;
  const backend::MatmulTask proj[] = {{l.qkv, ws.xn.view(), st.u.view()},
                                      {l.z, ws.xn.view(), st.gate.view()},
                                      {l.ssm_beta, ws.xn.view(), st.beta.view()},
                                      {l.ssm_alpha, ws.xn.view(), st.alpha.view()}};
  be.matmul_many(proj, T);
  backend::DeltaNetParams p;
  p.n_k_heads = cfg_.dn_k_heads;
  p.n_v_heads = cfg_.dn_v_heads;
  p.head_dim = cfg_.dn_head_dim;
  p.eps = cfg_.eps;
  p.dt_bias = l.dt_bias;
  p.ssm_a = l.ssm_a;
  // Each sequence's rows through its own conv rows and recurrent matrices.
  for (const BatchSegment& s : batch.segments) {
    const auto rows = [&](auto& buf, int64_t width) {
      return buf.view().sub(static_cast<size_t>(s.row0 * width), static_cast<size_t>(s.rows * width));
    };
    be.delta_net_conv(rows(st.u, C), s.rows, C, l.conv, cfg_.conv_taps, s.state->layers.conv(il),
                      rows(st.conv_out, C));
    be.gated_delta_net(p, rows(st.conv_out, C), rows(st.alpha, nv), rows(st.beta, nv), s.rows,
                       s.state->layers.matrix(il), rows(st.dn_out, nv * d));
  }
  // y = rms_norm(o) ⊙ ssm_norm ⊙ silu(z), per value head.
  be.rms_norm(st.dn_out.view(), T * nv, d, l.ssm_norm, cfg_.eps, st.dn_out.view());
  be.swiglu(st.gate.view(), st.dn_out.view(), T * nv * d, st.dn_out.view());
  be.matmul_add(l.ssm_out, st.dn_out.view(), T, ws.mix.view(), ws.x.view(), ws.scratch.view());
}

// post_attention_norm(x) into xn, then the router: the k experts of every token and their weights.
void Qwen35MoeModel::route(State& st, const Layer& l, int64_t T, const RoutingOut& out) {
  route_normed(*backend_, RouterInputs{router_params(), l.ffn_norm, cfg_.eps, l.router}, st.trunk.x.view(), T,
               cfg_.n_embd, st.trunk.scratch.view(), out);
}

void Qwen35MoeModel::run_moe(State& st, const SequenceBatch& batch, const Layer& l, ForwardCapture* capture) {
  MoeBuffers& m = st.moe;
  TrunkBuffers& ws = st.trunk;
  const int64_t T = batch.T, H = cfg_.n_embd;
  const int K = cfg_.n_expert_used, moe = l.moe_index;
  // The guesses use the post-mixer state, before this layer's FFN.
  route_with_read_ahead(m, moe, T, ws.xn.view(), [&](int target, const RoutingOut& out) {
    route(st, layers_[static_cast<size_t>(moe_model_layer(target))], T, out);
  });
  const backend::ActivationParams swiglu;
  const ExpertBiases none;
  // llama.cpp: moe + shared · sigmoid(gate · xn), then the residual: the shared output into mix, the
  // routed experts' weighted sum added onto it (f32 addition commutes), then mix into x.
  shared_expert(
      *backend_, ws,
      SharedExpert{l.shared_gate, l.shared_up, l.shared_down, &l.shared_gate_inp, st.shared_gate.view()}, T,
      H);
  add_experts(*backend_, *experts_, moe, m, st.wave, {swiglu, none, K, cfg_.n_expert, H, cfg_.n_ff_exp},
              ws.xn.view(), T, ws.mix.view());
  backend_->add(ws.x.view(), ws.mix.view(), T * H);
  report_moe(m, moe, batch, capture);
}

}  // namespace df::models

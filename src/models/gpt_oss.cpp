// gpt-oss forward pass (ARCHITECTURES.md 7.4). One batch of T tokens goes through every layer together; each
// MoE layer routes all T tokens, then acquires each chosen expert once and applies it to the tokens routed
// to it (moe_block's run_experts, with the OAI SwiGLU and the experts' biases). Sinks, the sliding window and
// YaRN are parameters of the backend's attention and rope. All buffers live in the state and grow only when
// a batch is larger than any before, so decoding allocates nothing.
#include "models/gpt_oss.h"

#include <cmath>

#include "models/model_common.h"
#include "models/moe_block.h"
#include "models/sequence_state.h"

namespace df::models {
namespace {

// ggml_swiglu_oai's constants in llama.cpp's gpt-oss graph.
constexpr backend::ActivationParams kOaiSwiglu{backend::Activation::OaiSwiGLU, 1.702f, 7.0f};

}  // namespace

class GptOssModel::State final : public MoeSequenceState {
 public:
  // Sliding-window layers keep every position too: a ring of n_swa + batch positions would save memory at
  // long contexts (llama.cpp's iSWA cache) but changes nothing numerically.
  State(const GptOssModel& model, int n_ctx)
      : MoeSequenceState(model, *model.backend_, n_ctx, layer_states(model.cfg_), model.cfg_.head_dim) {}

  size_t bytes() const override { return MoeSequenceState::bytes() + wave.bytes(); }

  // Every layer keeps a KV cache; the sliding ones note their window.
  static std::vector<LayerStateSpec> layer_states(const GptOssConfig& c) {
    std::vector<LayerStateSpec> specs;
    for (size_t il = 0; il < static_cast<size_t>(c.n_layer); ++il)
      specs.push_back(LayerStateSpec::kv(c.n_head_kv, c.head_dim, c.swa[il] ? c.n_swa : 0));
    return specs;
  }

  // Grows the batch buffers to hold T tokens (no-op when they already do).
  void reserve(int64_t T) {
    if (!batch_too_small(T)) return;
    const auto& c = model().cfg_;
    const size_t K = static_cast<size_t>(c.n_expert_used);
    grow_batch(T, BatchDims{static_cast<size_t>(c.n_embd),
                            static_cast<size_t>(c.n_head) * static_cast<size_t>(c.head_dim),
                            static_cast<size_t>(c.n_head_kv) * static_cast<size_t>(c.head_dim),
                            static_cast<size_t>(c.n_expert), K, model().max_act_row_bytes_});
    wave.reserve(K, static_cast<size_t>(c.n_expert));
    batch_grown(T);
  }

  const GptOssModel& model() const { return static_cast<const GptOssModel&>(*owner()); }
  ExpertWave wave;
};

std::unique_ptr<ModelState> GptOssModel::new_state(int n_ctx) {
  check_n_ctx(n_ctx);
  return std::make_unique<State>(*this, n_ctx);
}

void GptOssModel::run_batch(const SequenceBatch& batch, ForwardCapture* capture) {
  run_layers<State>(batch, capture, &GptOssModel::run_layer);
}

void GptOssModel::run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  TrunkBuffers& ws = st.trunk;
  const int64_t T = batch.T;
  const int64_t H = cfg_.n_embd, hd = cfg_.head_dim;
  const int64_t q_dim = cfg_.n_head * hd, kv_dim = cfg_.n_head_kv * hd;
  const bool swa = cfg_.swa[static_cast<size_t>(il)];
  backend::Backend& be = *backend_;

  be.rms_norm(ws.x.view(), T, H, l.attn_norm, cfg_.eps, ws.xn.view());
  const backend::MatmulTask qkv[] = {{l.wq, ws.xn.view(), ws.q.view()},
                                     {l.wk, ws.xn.view(), ws.k.view()},
                                     {l.wv, ws.xn.view(), ws.v.view()}};
  be.matmul_many(qkv, T);
  be.add_bias_rows(ws.q.view(), l.bq, T, q_dim);
  be.add_bias_rows(ws.k.view(), l.bk, T, kv_dim);
  be.add_bias_rows(ws.v.view(), l.bv, T, kv_dim);
  const backend::RopeParams& rope = swa ? cfg_.rope_swa : cfg_.rope;
  be.rope(ws.q.view(), T, cfg_.n_head, cfg_.head_dim, ws.pos.view(), rope);
  be.rope(ws.k.view(), T, cfg_.n_head_kv, cfg_.head_dim, ws.pos.view(), rope);
  backend::AttentionParams ap;
  ap.n_head = cfg_.n_head;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ap.window = swa ? cfg_.n_swa : 0;
  ap.sinks = l.sinks;
  attend_segments(be, batch, il, ap, q_dim, kv_dim);
  matmul(st, l.wo, ws.att.view(), T, ws.mix.view());
  be.add_bias_rows(ws.mix.view(), l.bo, T, H);
  be.add(ws.x.view(), ws.mix.view(), T * H);

  run_moe(st, batch, il, capture);
}

// post_attention_norm(x) into xn, router logits + bias, then the choice and weights of the k experts.
void GptOssModel::route(State& st, const Layer& l, backend::Buf<const float> x, int64_t T,
                        const RoutingOut& out) {
  backend_->rms_norm(x, T, cfg_.n_embd, l.post_attn_norm, cfg_.eps, out.xn);
  matmul(st, l.router, out.xn, T, out.logits);
  backend_->add_bias_rows(out.logits, l.router_bias, T, cfg_.n_expert);
  backend::RouterParams p;
  p.gating = backend::Gating::SoftmaxWeight;
  p.n_expert = cfg_.n_expert;
  p.k = cfg_.n_expert_used;
  backend_->route(p, out.logits, T, out.ids, out.weights);
}

void GptOssModel::run_moe(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture) {
  MoeBuffers& m = st.moe;
  const int64_t T = batch.T;
  TrunkBuffers& ws = st.trunk;
  const int64_t H = cfg_.n_embd;

  // Every layer is a MoE layer, so the MoE index is the model layer; the guesses use the post-attention
  // state.
  route_with_read_ahead(m, il, T, ws.xn.view(), [&](int target, const RoutingOut& out) {
    route(st, layers_[static_cast<size_t>(target)], ws.x.view(), T, out);
  });
  const Layer& l = layers_[static_cast<size_t>(il)];
  const ExpertBiases biases{l.gate_bias, l.up_bias, l.down_bias};
  add_experts(*backend_, *experts_, il, m, st.wave,
              {kOaiSwiglu, biases, cfg_.n_expert_used, cfg_.n_expert, H, cfg_.n_ff_exp}, ws.xn.view(), T,
              ws.x.view());
  report_moe(m, il, batch, capture);
}

}  // namespace df::models

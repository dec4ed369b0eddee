// gemma4 forward pass (ARCHITECTURES.md 4.3, llama.cpp's src/models/gemma4.cpp), written against the backend
// ops. One batch of T tokens (of one sequence or several, each through its own KV caches) goes through every
// layer together; each MoE layer routes all T tokens, then acquires each chosen expert once and applies it to
// the tokens routed to it (moe_block.h), beside the dense GeGLU branch every token goes through. All buffers
// live in the state and grow only when a batch is larger than any before, so decoding allocates nothing.
#include "models/gemma4.h"

#include <cmath>

#include "models/model_common.h"
#include "models/moe_block.h"
#include "models/sequence_state.h"

namespace df::models {
namespace {

// ggml_gelu (tanh approximation) gating the up projection, as LLM_FFN_GELU with LLM_FFN_PAR.
constexpr backend::ActivationParams kGeglu{backend::Activation::GeGLU};

}  // namespace

class Gemma4Model::State final : public MoeSequenceState {
 public:
  // Sliding-window layers keep every position (as gpt-oss's): a ring would save memory at long contexts but
  // changes nothing numerically.
  State(const Gemma4Model& model, int n_ctx)
      : MoeSequenceState(model, *model.backend_, n_ctx, layer_states(model.cfg_), model.cfg_.max_head_dim()) {
  }

  static std::vector<LayerStateSpec> layer_states(const Gemma4Config& c) {
    std::vector<LayerStateSpec> specs;
    for (size_t il = 0; il < static_cast<size_t>(c.n_layer); ++il)
      specs.push_back(LayerStateSpec::kv(c.n_head_kv[il], c.head_dim[il], c.swa[il] ? c.n_swa : 0));
    return specs;
  }

  size_t bytes() const override { return MoeSequenceState::bytes() + moe_sum.bytes() + wave.bytes(); }

  // Grows the batch buffers to hold T tokens (no-op when they already do). q, k and v are sized for the
  // widest layer.
  void reserve(int64_t T) {
    if (!batch_too_small(T)) return;
    const auto& c = model().cfg_;
    const size_t H = static_cast<size_t>(c.n_embd);
    grow_batch(T, BatchDims{H, static_cast<size_t>(c.max_q_dim()), static_cast<size_t>(c.max_kv_dim()),
                            static_cast<size_t>(c.n_expert), static_cast<size_t>(c.n_expert_used),
                            model().max_act_row_bytes_});
    moe_sum.resize(be, static_cast<size_t>(T) * H, "expert branch buffer");
    wave.reserve(static_cast<size_t>(c.n_expert_used), static_cast<size_t>(c.n_expert));
    batch_grown(T);
  }

  const Gemma4Model& model() const { return static_cast<const Gemma4Model&>(*owner()); }
  // The router's input, then the weighted sum of the chosen experts' outputs (rows of H).
  DeviceArray<float> moe_sum;
  ExpertWave wave;
};

std::unique_ptr<ModelState> Gemma4Model::new_state(int n_ctx) {
  check_n_ctx(n_ctx);
  return std::make_unique<State>(*this, n_ctx);
}

void Gemma4Model::run_batch(const SequenceBatch& batch, ForwardCapture* capture) {
  run_layers<State>(batch, capture, &Gemma4Model::run_layer);
}

// Q, K and V of the normed stream (V = the un-normed K projection where the layer has no V), per-head norms
// (V's without a weight), RoPE with the layer's base, dims and (global layers) θ divisors, attention with
// scale 1 (and the window on sliding layers), the output projection into mix.
void Gemma4Model::attention(State& st, const SequenceBatch& batch, int il) {
  const size_t l = static_cast<size_t>(il);
  const Layer& ly = layers_[l];
  TrunkBuffers& b = st.trunk;
  backend::Backend& be = *backend_;
  const int64_t T = batch.T, hd = cfg_.head_dim[l];
  const int n_kv = cfg_.n_head_kv[l];
  const int64_t q_dim = cfg_.n_head * hd, kv_dim = n_kv * hd;
  if (ly.wv.data) {
    const backend::MatmulTask qkv[] = {
        {ly.wq, b.xn.view(), b.q.view()}, {ly.wk, b.xn.view(), b.k.view()}, {ly.wv, b.xn.view(), b.v.view()}};
    be.matmul_many(qkv, T);
  } else {
    const backend::MatmulTask qk[] = {{ly.wq, b.xn.view(), b.q.view()}, {ly.wk, b.xn.view(), b.k.view()}};
    be.matmul_many(qk, T);
    be.copy(b.v.view(), backend::Buf<const float>(b.k.view()), static_cast<size_t>(T * kv_dim));
  }
  be.rms_norm(b.q.view(), T * cfg_.n_head, hd, ly.q_norm, cfg_.eps, b.q.view());
  be.rms_norm(b.k.view(), T * n_kv, hd, ly.k_norm, cfg_.eps, b.k.view());
  be.rms_norm(b.v.view(), T * n_kv, hd, {}, cfg_.eps, b.v.view());
  backend::RopeParams rope;
  rope.n_rot = cfg_.n_rot[l];
  if (cfg_.swa[l]) {
    rope.freq_base = cfg_.rope_theta_swa;
  } else {
    rope.freq_base = cfg_.rope_theta;
    rope.freq_scale = cfg_.rope_freq_scale;
    rope.freq_factors = rope_freqs_;
  }
  be.rope(b.q.view(), T, cfg_.n_head, static_cast<int>(hd), b.pos.view(), rope);
  be.rope(b.k.view(), T, n_kv, static_cast<int>(hd), b.pos.view(), rope);
  backend::AttentionParams ap;
  ap.n_head = cfg_.n_head;
  ap.scale = 1.0f;  // llama.cpp's f_attention_scale for gemma4: the Q norm takes the place of 1/sqrt(d)
  ap.window = cfg_.swa[l] ? cfg_.n_swa : 0;
  attend_segments(be, batch, il, ap, q_dim, kv_dim);
  be.matmul(ly.wo, b.att.view(), T, b.mix.view(), b.scratch.view());
}

void Gemma4Model::run_layer(State& st, const SequenceBatch& batch, int il, ForwardCapture* capture) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  TrunkBuffers& ws = st.trunk;
  const int64_t T = batch.T, H = cfg_.n_embd;
  backend::Backend& be = *backend_;

  // x = x + post_attention_norm(attention(attn_norm(x))): from here on x is llama.cpp's attn_out.
  be.rms_norm(ws.x.view(), T, H, l.attn_norm, cfg_.eps, ws.xn.view());
  attention(st, batch, il);
  be.rms_norm(ws.mix.view(), T, H, l.post_attn_norm, cfg_.eps, ws.mix.view());
  be.add(ws.x.view(), ws.mix.view(), T * H);

  // The dense GeGLU branch into mix; on MoE layers normed, then the expert branch added.
  be.rms_norm(ws.x.view(), T, H, l.ffn_norm, cfg_.eps, ws.xn.view());
  dense_ffn(be, l.ffn_gate, l.ffn_up, l.ffn_down, kGeglu, ws.xn.view(), T, ws.mix.view());
  if (l.moe_index >= 0) {
    be.rms_norm(ws.mix.view(), T, H, l.post_norm_1, cfg_.eps, ws.mix.view());
    run_moe(st, batch, l, capture);
    be.add(ws.mix.view(), st.moe_sum.view(), T * H);
  }
  // x = (x + post_ffw_norm(mix)) · layer_output_scale
  be.rms_norm(ws.mix.view(), T, H, l.ffn_post_norm, cfg_.eps, ws.mix.view());
  be.add(ws.x.view(), ws.mix.view(), T * H);
  if (l.out_scale_buf) be.scale(ws.x.view(), T * H, l.out_scale);
}

void Gemma4Model::route(State& st, const Layer& l, backend::Buf<const float> x, int64_t T,
                        const RoutingOut& out) {
  backend::Backend& be = *backend_;
  const int64_t H = cfg_.n_embd;
  be.rms_norm(x, T, H, {}, cfg_.eps, out.xn);
  be.scale(out.xn, T * H, 1.0f / std::sqrt(static_cast<float>(H)));
  be.mul_rows(out.xn, l.router_scale, T, H);
  matmul(st, l.router, out.xn, T, out.logits);
  backend::RouterParams p;
  p.gating = backend::Gating::Softmax;
  p.n_expert = cfg_.n_expert;
  p.k = cfg_.n_expert_used;
  p.normalize = true;  // build_moe_ffn(norm_w = true, scale 1)
  p.scale = 1.0f;
  be.route(p, out.logits, T, out.ids, out.weights);
}

// The expert branch of layer l on the stream x (attn_out): routed on its own scaled norm, the experts applied
// to pre_ffw_norm_2(x), their weighted sum into moe_sum, normed with post_ffw_norm_2.
void Gemma4Model::run_moe(State& st, const SequenceBatch& batch, const Layer& l, ForwardCapture* capture) {
  MoeBuffers& m = st.moe;
  TrunkBuffers& ws = st.trunk;
  backend::Backend& be = *backend_;
  const int64_t T = batch.T, H = cfg_.n_embd;
  const int K = cfg_.n_expert_used, moe = l.moe_index;
  // moe_sum holds the router's input until the experts' sum replaces it.
  route_with_read_ahead(m, moe, T, st.moe_sum.view(), [&](int target, const RoutingOut& out) {
    route(st, layers_[static_cast<size_t>(moe_model_layer(target))], ws.x.view(), T, out);
  });
  be.rms_norm(ws.x.view(), T, H, l.pre_norm_2, cfg_.eps, ws.xn.view());
  ExpertBiases scales;
  scales.down_scale = l.down_scale;
  scales.down_scale_host = l.down_scale_host;
  be.fill_zero(st.moe_sum.view());
  add_experts(be, *experts_, moe, m, st.wave, {kGeglu, scales, K, cfg_.n_expert, H, cfg_.n_ff_exp},
              ws.xn.view(), T, st.moe_sum.view());
  be.rms_norm(st.moe_sum.view(), T, H, l.post_norm_2, cfg_.eps, st.moe_sum.view());
  report_moe(m, moe, batch, capture);
}

}  // namespace df::models

// gpt-oss forward pass (ARCHITECTURES.md 7.4). One batch of T tokens goes through every layer together; each
// MoE layer routes all T tokens, then acquires each chosen expert once and applies it to the tokens routed
// to it (run_experts). The backend has no op for sinks, sliding windows, YaRN, OAI SwiGLU or biases yet:
// those come from gpt_oss_ops.h (single-threaded CPU). All buffers live in the state and grow only when a
// batch is larger than any before, so decoding allocates nothing.
#include "models/gpt_oss.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "models/model_common.h"
#include "models/moe_block.h"
#include "models/sequence_state.h"

namespace df::models {
namespace {

// ggml_swiglu_oai's constants in llama.cpp's gpt-oss graph.
constexpr float kOaiAlpha = 1.702f;
constexpr float kOaiLimit = 7.0f;
// Experts per wave: gate and up of each go into one matmul_many call.
constexpr size_t kWave = backend::CpuBackend::kMaxMatmulTasks / 2;

}  // namespace

class GptOssModel::State final : public MoeSequenceState {
 public:
  // Sliding-window layers keep every position too: a ring of n_swa + batch positions would save memory at
  // long contexts (llama.cpp's iSWA cache) but changes nothing numerically.
  State(const GptOssModel& model, int n_ctx)
      : MoeSequenceState(n_ctx,
                         KvCache({}, model.cfg_.n_layer, n_ctx, model.cfg_.n_head_kv, model.cfg_.head_dim)),
        model_(&model) {
    trunk.attn_scratch.resize(gpt_oss::attention_scratch_floats(n_ctx, model.cfg_.head_dim));
  }

  size_t bytes() const override {
    size_t total = MoeSequenceState::bytes();
    for (const auto* b : {&xg, &gate, &up, &act, &down}) total += b->size() * sizeof(float);
    return total;
  }

  void copy_sequence_from(const ModelState& other) override {
    const auto* o = dynamic_cast<const State*>(&other);
    if (!o || o->model_ != model_)
      fail("gpt-oss: copy_sequence_from() was given a state made by another model");
    copy_kv_from(*o, "gpt-oss");
  }

  // Grows the batch buffers to hold T tokens (no-op when they already do).
  void reserve(int64_t T) {
    if (!batch_too_small(T)) return;
    const auto& c = model_->cfg_;
    const size_t t = static_cast<size_t>(T), H = static_cast<size_t>(c.n_embd);
    const size_t F = static_cast<size_t>(c.n_ff_exp), K = static_cast<size_t>(c.n_expert_used);
    grow_batch(T, BatchDims{H, static_cast<size_t>(c.n_head) * static_cast<size_t>(c.head_dim),
                            static_cast<size_t>(c.n_head_kv) * static_cast<size_t>(c.head_dim),
                            static_cast<size_t>(c.n_expert), K, model_->max_act_row_bytes_});
    for (auto* b : {&xg, &down}) b->resize(t * K * H);
    for (auto* b : {&gate, &up, &act}) b->resize(t * K * F);
    batch_grown(T);
  }

  const GptOssModel* model_;
  // The experts' inputs gathered in entry order, and their gate, up, activation and down rows.
  std::vector<float> xg, gate, up, act, down;
  std::array<int32_t, kWave> wave_ids{};
  std::array<ExpertView, kWave> wave_views{};
};

std::unique_ptr<ModelState> GptOssModel::new_state(int n_ctx) {
  check_n_ctx(n_ctx);
  return std::make_unique<State>(*this, n_ctx);
}

void GptOssModel::forward(ModelState& state, std::span<const int32_t> tokens, std::span<float> logits,
                          bool all_rows, ForwardCapture* capture) {
  State& st = forward_state<State>(state, tokens, logits, all_rows);
  const int64_t T = static_cast<int64_t>(tokens.size());
  st.reserve(T);
  forward_trunk(st, tokens, logits, all_rows, capture, [&](int il) { run_layer(st, il, T, capture); });
}

void GptOssModel::run_layer(State& st, int il, int64_t T, ForwardCapture* capture) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  TrunkBuffers& ws = st.trunk;
  const int64_t H = cfg_.n_embd, hd = cfg_.head_dim;
  const int64_t q_dim = cfg_.n_head * hd, kv_dim = cfg_.n_head_kv * hd;
  const bool swa = cfg_.swa[static_cast<size_t>(il)];

  backend_->rms_norm(ws.x.data(), T, H, l.attn_norm, cfg_.eps, ws.xn.data());
  const backend::MatmulTask qkv[] = {{l.wq, ws.xn.data(), ws.q.data()},
                                     {l.wk, ws.xn.data(), ws.k.data()},
                                     {l.wv, ws.xn.data(), ws.v.data()}};
  backend_->matmul_many(qkv, T);
  gpt_oss::add_bias_rows(ws.q.data(), l.bq, T, q_dim);
  gpt_oss::add_bias_rows(ws.k.data(), l.bk, T, kv_dim);
  gpt_oss::add_bias_rows(ws.v.data(), l.bv, T, kv_dim);
  const gpt_oss::RopeParams& rope = swa ? cfg_.rope_swa : cfg_.rope;
  gpt_oss::rope_neox_yarn(ws.q.data(), T, cfg_.n_head, cfg_.head_dim, ws.pos.data(), rope);
  gpt_oss::rope_neox_yarn(ws.k.data(), T, cfg_.n_head_kv, cfg_.head_dim, ws.pos.data(), rope);
  const backend::KvCacheView kv = st.kv.view(il);
  backend_->kv_store(kv, ws.k.data(), ws.v.data(), T, st.n_past);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  gpt_oss::attention_sinks(kv, ws.q.data(), T, st.n_past, cfg_.n_head, scale, l.sinks, swa ? cfg_.n_swa : 0,
                           ws.att.data(), ws.attn_scratch);
  matmul(st, l.wo, ws.att.data(), T, ws.mix.data());
  gpt_oss::add_bias_rows(ws.mix.data(), l.bo, T, H);
  backend_->add(ws.x.data(), ws.mix.data(), T * H);

  run_moe(st, il, T, capture);
}

// post_attention_norm(x) into xn, router logits + bias, then the choice and weights of the k experts.
void GptOssModel::route(State& st, const Layer& l, const float* x, int64_t T, float* xn, float* router_logits,
                        int32_t* ids, float* weights) {
  backend_->rms_norm(x, T, cfg_.n_embd, l.post_attn_norm, cfg_.eps, xn);
  matmul(st, l.router, xn, T, router_logits);
  gpt_oss::add_bias_rows(router_logits, l.router_bias, T, cfg_.n_expert);
  gpt_oss::route_softmax_weight(router_logits, T, cfg_.n_expert, cfg_.n_expert_used, ids, weights);
}

void GptOssModel::run_moe(State& st, int il, int64_t T, ForwardCapture* capture) {
  MoeBuffers& m = st.moe;
  TrunkBuffers& ws = st.trunk;
  const int64_t H = cfg_.n_embd, K = cfg_.n_expert_used;

  // Every layer is a MoE layer, so the MoE index is the model layer; the guesses use the post-attention
  // state.
  prefetch_next_layers(*experts_, m, il, cfg_.n_layer, prefetch_lookahead_, T, cfg_.n_expert_used,
                       cfg_.n_expert, [&](int target) {
                         route(st, layers_[static_cast<size_t>(target)], ws.x.data(), T, m.guess_xn.data(),
                               m.guess_logits.data(), m.guess_ids.data(), m.guess_weights.data());
                       });
  route(st, layers_[static_cast<size_t>(il)], ws.x.data(), T, ws.xn.data(), m.router_logits.data(),
        m.expert_ids.data(), m.expert_weights.data());
  const size_t n_used = group_by_expert(m, T, cfg_.n_expert_used, cfg_.n_expert);
  // Each expert's input rows, contiguous in entry order.
  for (int64_t at = 0; at < T * K; ++at)
    std::copy_n(ws.xn.data() + m.entry_tokens[static_cast<size_t>(at)] * H, H, st.xg.data() + at * H);

  run_experts(st, il, n_used);

  // Outputs back to (token, slot) order, then weighted and summed in slot order.
  for (int64_t at = 0; at < T * K; ++at)
    std::copy_n(st.down.data() + at * H, H,
                m.expert_out.data() + static_cast<int64_t>(m.expert_entries[static_cast<size_t>(at)]) * H);
  add_expert_outputs(*backend_, m, ws.x.data(), T, cfg_.n_expert_used, H);
  capture_routing(capture, il, T, cfg_.n_expert_used, m);
}

// The chosen experts (moe.used[0..n_used)), each on its gathered rows (xg at expert_start[e]): gate and up
// with their biases, the OAI SwiGLU, down with its bias, into `down` at the same entry rows. Experts go in
// waves of up to kWave: the wave's gate/up products run as one matmul_many (so that a decode step's k small
// products keep every thread busy), and so do its down products when every expert of the wave has the
// same number of rows (always in decode). will_acquire() announces the whole layer first, so a disk
// provider reads every expert of the layer at once.
void GptOssModel::run_experts(State& st, int il, size_t n_used) {
  const MoeBuffers& m = st.moe;
  const Layer& l = layers_[static_cast<size_t>(il)];
  const int64_t H = cfg_.n_embd, F = cfg_.n_ff_exp;
  experts_->will_acquire(il, std::span<const int32_t>(m.used.data(), n_used));
  std::array<backend::MatmulTask, backend::CpuBackend::kMaxMatmulTasks> tasks;
  for (size_t w0 = 0; w0 < n_used; w0 += kWave) {
    const size_t n = std::min(kWave, n_used - w0);
    WaveLeases leases(*experts_, il, st.wave_ids.data());
    bool same_rows = true;
    for (size_t i = 0; i < n; ++i) {
      const int32_t e = m.used[w0 + i];
      st.wave_views[i] = leases.acquire(e);
      same_rows = same_rows &&
                  m.expert_count[static_cast<size_t>(e)] == m.expert_count[static_cast<size_t>(m.used[w0])];
    }
    const auto start = [&](size_t i) {
      return static_cast<int64_t>(m.expert_start[static_cast<size_t>(m.used[w0 + i])]);
    };
    const auto rows = [&](size_t i) {
      return static_cast<int64_t>(m.expert_count[static_cast<size_t>(m.used[w0 + i])]);
    };
    const auto gate_up = [&](size_t i) {
      const ExpertView& v = st.wave_views[i];
      const float* x = st.xg.data() + start(i) * H;
      return std::array<backend::MatmulTask, 2>{
          backend::MatmulTask{v.gate_weight(H, F), x, st.gate.data() + start(i) * F},
          backend::MatmulTask{v.up_weight(H, F), x, st.up.data() + start(i) * F}};
    };
    const auto down = [&](size_t i) {
      const ExpertView& v = st.wave_views[i];
      return backend::MatmulTask{v.down_weight(H, F), st.act.data() + start(i) * F,
                                 st.down.data() + start(i) * H};
    };
    const auto activate = [&](size_t i) {
      const int64_t e = m.used[w0 + i], r0 = start(i), nr = rows(i);
      gpt_oss::add_bias_rows(st.gate.data() + r0 * F, l.gate_bias + e * F, nr, F);
      gpt_oss::add_bias_rows(st.up.data() + r0 * F, l.up_bias + e * F, nr, F);
      gpt_oss::swiglu_oai(st.gate.data() + r0 * F, st.up.data() + r0 * F, nr * F, kOaiAlpha, kOaiLimit,
                          st.act.data() + r0 * F);
    };

    if (same_rows) {
      for (size_t i = 0; i < n; ++i) {
        const auto gu = gate_up(i);
        tasks[2 * i] = gu[0];
        tasks[2 * i + 1] = gu[1];
      }
      backend_->matmul_many(std::span(tasks.data(), 2 * n), rows(0));
      for (size_t i = 0; i < n; ++i) activate(i);
      for (size_t i = 0; i < n; ++i) tasks[i] = down(i);
      backend_->matmul_many(std::span(tasks.data(), n), rows(0));
    } else {
      for (size_t i = 0; i < n; ++i) {
        const auto gu = gate_up(i);
        backend_->matmul_many(gu, rows(i));
        activate(i);
        const backend::MatmulTask d = down(i);
        matmul(st, d.w, d.x, rows(i), d.y);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t e = m.used[w0 + i];
      gpt_oss::add_bias_rows(st.down.data() + start(i) * H, l.down_bias + e * H, rows(i), H);
    }
  }
}

}  // namespace df::models

// gpt-oss forward pass (ARCHITECTURES.md 7.4). One batch of T tokens goes through every layer together; each
// MoE layer routes all T tokens, then acquires each chosen expert once and applies it to the tokens routed
// to it (run_experts). The backend has no op for sinks, sliding windows, YaRN, OAI SwiGLU or biases yet:
// those come from gpt_oss_ops.h (single-threaded CPU). All buffers live in the state and grow only when a
// batch is larger than any before, so decoding allocates nothing.
#include "models/gpt_oss.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "util/error.h"

namespace df::models {
namespace {

// ggml_swiglu_oai's constants in llama.cpp's gpt-oss graph.
constexpr float kOaiAlpha = 1.702f;
constexpr float kOaiLimit = 7.0f;
// Experts per wave: gate and up of each go into one matmul_many call.
constexpr size_t kWave = backend::CpuBackend::kMaxMatmulTasks / 2;

}  // namespace

// Buffers for a batch of up to `rows` tokens.
struct GptOssModel::Workspace {
  int64_t rows = 0;
  std::vector<int32_t> pos;
  std::vector<float> x, xn, mix, q, k, v, att;
  std::vector<float> router_logits, expert_weights, expert_out, moe;
  std::vector<int32_t> expert_ids;
  // Per-expert batches: the (token, slot) entries routed to each expert, grouped by expert, and the token
  // of each of those entries.
  std::vector<int32_t> expert_count, expert_start, expert_entries, entry_tokens, used;
  // The experts' inputs gathered in entry order, and their gate, up, activation and down rows.
  std::vector<float> xg, gate, up, act, down;
  std::array<int32_t, kWave> wave_ids{};
  std::array<ExpertView, kWave> wave_views{};
  // Prefetch guesses.
  std::vector<float> guess_xn, guess_logits, guess_weights;
  std::vector<int32_t> guess_ids, guess_list;
  std::vector<uint8_t> guess_mask;
  std::vector<uint8_t> scratch;
  std::vector<float> attn_scratch;
};

class GptOssModel::State final : public ModelState {
 public:
  State(const GptOssModel& model, int n_ctx) : model_(&model), n_ctx_(n_ctx) {
    const auto& c = model.cfg_;
    const size_t kv_row = static_cast<size_t>(c.n_head_kv) * static_cast<size_t>(c.head_dim);
    k.resize(static_cast<size_t>(c.n_layer));
    v.resize(static_cast<size_t>(c.n_layer));
    // Sliding-window layers keep every position too: a ring of n_swa + batch positions would save memory
    // at long contexts (llama.cpp's iSWA cache) but changes nothing numerically.
    for (size_t il = 0; il < static_cast<size_t>(c.n_layer); ++il) {
      k[il].assign(kv_row * static_cast<size_t>(n_ctx), 0);
      v[il].assign(kv_row * static_cast<size_t>(n_ctx), 0);
    }
    ws.attn_scratch.resize(gpt_oss::attention_scratch_floats(n_ctx, c.head_dim));
  }

  int n_ctx() const override { return n_ctx_; }
  // The KV cache needs no clearing: attention reads only positions below n_past + T.
  void reset() override { n_past = 0; }
  size_t bytes() const override {
    size_t total = ws.attn_scratch.size() * sizeof(float) + ws.scratch.size();
    for (size_t il = 0; il < k.size(); ++il) total += (k[il].size() + v[il].size()) * sizeof(uint16_t);
    for (const auto* b : {&ws.x, &ws.xn, &ws.mix, &ws.q, &ws.k, &ws.v, &ws.att, &ws.router_logits,
                          &ws.expert_weights, &ws.expert_out, &ws.moe, &ws.xg, &ws.gate, &ws.up, &ws.act,
                          &ws.down, &ws.guess_xn, &ws.guess_logits, &ws.guess_weights})
      total += b->size() * sizeof(float);
    return total;
  }

  backend::KvCacheView kv(int il) {
    const auto& c = model_->cfg_;
    return backend::KvCacheView{k[static_cast<size_t>(il)].data(), v[static_cast<size_t>(il)].data(), n_ctx_,
                                c.n_head_kv, c.head_dim};
  }

  // Grows the batch buffers to hold T tokens (no-op when they already do).
  void reserve(int64_t T) {
    if (T <= ws.rows) return;
    const auto& c = model_->cfg_;
    const size_t t = static_cast<size_t>(T), H = static_cast<size_t>(c.n_embd);
    const size_t F = static_cast<size_t>(c.n_ff_exp);
    const size_t q_dim = static_cast<size_t>(c.n_head) * static_cast<size_t>(c.head_dim);
    const size_t kv_dim = static_cast<size_t>(c.n_head_kv) * static_cast<size_t>(c.head_dim);
    const size_t E = static_cast<size_t>(c.n_expert), K = static_cast<size_t>(c.n_expert_used);
    ws.pos.resize(t);
    for (auto* b : {&ws.x, &ws.xn, &ws.mix, &ws.moe, &ws.guess_xn}) b->resize(t * H);
    ws.q.resize(t * q_dim);
    ws.att.resize(t * q_dim);
    ws.k.resize(t * kv_dim);
    ws.v.resize(t * kv_dim);
    ws.router_logits.resize(t * E);
    ws.guess_logits.resize(t * E);
    ws.expert_ids.resize(t * K);
    ws.expert_weights.resize(t * K);
    ws.guess_ids.resize(t * K);
    ws.guess_weights.resize(t * K);
    for (auto* b : {&ws.expert_out, &ws.xg, &ws.down}) b->resize(t * K * H);
    for (auto* b : {&ws.gate, &ws.up, &ws.act}) b->resize(t * K * F);
    ws.expert_entries.resize(t * K);
    ws.entry_tokens.resize(t * K);
    ws.expert_count.resize(E);
    ws.expert_start.resize(E + 1);
    ws.used.resize(E);
    ws.guess_list.resize(E);
    ws.guess_mask.resize(E);
    ws.scratch.resize(t * model_->max_act_row_bytes_);
    ws.rows = T;
  }

  const GptOssModel* model_;
  int n_ctx_;
  std::vector<std::vector<uint16_t>> k, v;  // per layer
  Workspace ws;
};

std::unique_ptr<ModelState> GptOssModel::new_state(int n_ctx) {
  if (n_ctx < 1) fail("gpt-oss: context size {} must be at least 1", n_ctx);
  return std::make_unique<State>(*this, n_ctx);
}

void GptOssModel::matmul(State& st, const backend::Weight& w, const float* x, int64_t rows, float* y) {
  backend_->matmul(w, x, rows, y, st.ws.scratch);
}

void GptOssModel::forward(ModelState& state, std::span<const int32_t> tokens, std::span<float> logits,
                          bool all_rows, ForwardCapture* capture) {
  auto* st = dynamic_cast<State*>(&state);
  if (!st || st->model_ != this) fail("gpt-oss: forward() was given a state made by another model");
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) fail("gpt-oss: forward() needs at least one token");
  if (st->n_past < 0 || st->n_past + T > st->n_ctx())
    fail("gpt-oss: context full: {} positions used + {} new tokens > context size {}", st->n_past, T,
         st->n_ctx());
  const size_t want = static_cast<size_t>(all_rows ? T : 1) * static_cast<size_t>(cfg_.n_vocab);
  if (logits.size() != want)
    fail("gpt-oss: logits buffer holds {} floats, {} expected ({} rows of {})", logits.size(), want,
         all_rows ? T : 1, cfg_.n_vocab);
  for (int32_t id : tokens)
    if (id < 0 || id >= cfg_.n_vocab)
      fail("gpt-oss: token id {} is out of range (vocabulary of {})", id, cfg_.n_vocab);

  st->reserve(T);
  Workspace& ws = st->ws;
  const int64_t H = cfg_.n_embd;
  for (int64_t t = 0; t < T; ++t) ws.pos[static_cast<size_t>(t)] = static_cast<int32_t>(st->n_past + t);
  if (capture) {
    const size_t moe_entries = expert_layout_.layers.size() * static_cast<size_t>(T * cfg_.n_expert_used);
    capture->expert_ids.assign(moe_entries, -1);
    capture->expert_weights.assign(moe_entries, 0.0f);
    if (capture->want_layers) capture->l_out.assign(static_cast<size_t>(cfg_.n_layer * T * H), 0.0f);
  }

  backend_->get_rows(tok_embd_, tokens, ws.x.data());
  for (int il = 0; il < cfg_.n_layer; ++il) {
    run_layer(*st, il, T, capture);
    if (capture && capture->want_layers)
      std::copy_n(ws.x.data(), T * H,
                  capture->l_out.data() + static_cast<size_t>(il) * static_cast<size_t>(T * H));
  }

  const int64_t rows = all_rows ? T : 1;
  const float* last = ws.x.data() + (T - rows) * H;
  backend_->rms_norm(last, rows, H, output_norm_, cfg_.eps, ws.xn.data());
  matmul(*st, output_, ws.xn.data(), rows, logits.data());
  st->n_past += static_cast<int>(T);
}

void GptOssModel::run_layer(State& st, int il, int64_t T, ForwardCapture* capture) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  Workspace& ws = st.ws;
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
  const backend::KvCacheView kv = st.kv(il);
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

// The seed's prefetch rule: the routers of the next MoE layers applied to the current (post-attention)
// state. Only the provider sees the result.
void GptOssModel::prefetch_guesses(State& st, int il, int64_t T) {
  Workspace& ws = st.ws;
  const int64_t K = cfg_.n_expert_used;
  for (int ahead = 1; ahead <= prefetch_lookahead_ && il + ahead < cfg_.n_layer; ++ahead) {
    const int target = il + ahead;
    route(st, layers_[static_cast<size_t>(target)], ws.x.data(), T, ws.guess_xn.data(),
          ws.guess_logits.data(), ws.guess_ids.data(), ws.guess_weights.data());
    std::fill(ws.guess_mask.begin(), ws.guess_mask.end(), 0);
    for (int64_t i = 0; i < T * K; ++i)
      ws.guess_mask[static_cast<size_t>(ws.guess_ids[static_cast<size_t>(i)])] = 1;
    size_t n = 0;
    for (int e = 0; e < cfg_.n_expert; ++e)
      if (ws.guess_mask[static_cast<size_t>(e)]) ws.guess_list[n++] = e;
    experts_->prefetch(target, std::span<const int32_t>(ws.guess_list.data(), n));
  }
}

void GptOssModel::run_moe(State& st, int il, int64_t T, ForwardCapture* capture) {
  Workspace& ws = st.ws;
  const int64_t H = cfg_.n_embd, K = cfg_.n_expert_used, E = cfg_.n_expert;

  prefetch_guesses(st, il, T);
  route(st, layers_[static_cast<size_t>(il)], ws.x.data(), T, ws.xn.data(), ws.router_logits.data(),
        ws.expert_ids.data(), ws.expert_weights.data());

  // Group the T·K (token, slot) entries by expert, tokens in order within each expert.
  std::fill(ws.expert_count.begin(), ws.expert_count.end(), 0);
  for (int64_t i = 0; i < T * K; ++i)
    ++ws.expert_count[static_cast<size_t>(ws.expert_ids[static_cast<size_t>(i)])];
  size_t n_used = 0;
  ws.expert_start[0] = 0;
  for (int64_t e = 0; e < E; ++e) {
    ws.expert_start[static_cast<size_t>(e + 1)] =
        ws.expert_start[static_cast<size_t>(e)] + ws.expert_count[static_cast<size_t>(e)];
    if (ws.expert_count[static_cast<size_t>(e)] > 0) ws.used[n_used++] = static_cast<int32_t>(e);
  }
  std::fill(ws.expert_count.begin(), ws.expert_count.end(), 0);
  for (int64_t i = 0; i < T * K; ++i) {
    const size_t e = static_cast<size_t>(ws.expert_ids[static_cast<size_t>(i)]);
    const size_t at = static_cast<size_t>(ws.expert_start[e] + ws.expert_count[e]++);
    ws.expert_entries[at] = static_cast<int32_t>(i);
    ws.entry_tokens[at] = static_cast<int32_t>(i / K);
  }
  // Each expert's input rows, contiguous in entry order.
  for (int64_t at = 0; at < T * K; ++at)
    std::copy_n(ws.xn.data() + ws.entry_tokens[static_cast<size_t>(at)] * H, H, ws.xg.data() + at * H);

  run_experts(st, il, n_used);

  // Outputs back to (token, slot) order, then weighted and summed in slot order.
  for (int64_t at = 0; at < T * K; ++at)
    std::copy_n(ws.down.data() + at * H, H,
                ws.expert_out.data() + static_cast<int64_t>(ws.expert_entries[static_cast<size_t>(at)]) * H);
  backend_->moe_combine(ws.expert_out.data(), ws.expert_weights.data(), T, static_cast<int>(K), H,
                        ws.moe.data());
  backend_->add(ws.x.data(), ws.moe.data(), T * H);

  if (capture) {
    const size_t off = static_cast<size_t>(il) * static_cast<size_t>(T * K);
    std::copy_n(ws.expert_ids.data(), T * K, capture->expert_ids.data() + off);
    std::copy_n(ws.expert_weights.data(), T * K, capture->expert_weights.data() + off);
  }
}

namespace {

// The experts of one wave, released (in acquisition order) on every path out of the scope.
class WaveLeases {
 public:
  WaveLeases(ExpertProvider& p, int layer, int32_t* held) : p_(p), layer_(layer), held_(held) {}
  ~WaveLeases() {
    for (size_t i = 0; i < n_; ++i) p_.release(layer_, held_[i]);
  }
  WaveLeases(const WaveLeases&) = delete;
  WaveLeases& operator=(const WaveLeases&) = delete;

  ExpertView acquire(int32_t expert) {
    const ExpertView v = p_.acquire(layer_, expert);
    held_[n_++] = expert;
    return v;
  }

 private:
  ExpertProvider& p_;
  int layer_;
  int32_t* held_;  // room for a whole wave
  size_t n_ = 0;
};

}  // namespace

// The chosen experts (ws.used[0..n_used)), each on its gathered rows (xg at expert_start[e]): gate and up
// with their biases, the OAI SwiGLU, down with its bias, into `down` at the same entry rows. Experts go in
// waves of up to kWave: the wave's gate/up products run as one matmul_many (so that a decode step's k small
// products keep every thread busy), and so do its down products when every expert of the wave has the
// same number of rows (always in decode). will_acquire() announces the whole layer first, so a disk
// provider reads every expert of the layer at once.
void GptOssModel::run_experts(State& st, int il, size_t n_used) {
  Workspace& ws = st.ws;
  const Layer& l = layers_[static_cast<size_t>(il)];
  const int64_t H = cfg_.n_embd, F = cfg_.n_ff_exp;
  experts_->will_acquire(il, std::span<const int32_t>(ws.used.data(), n_used));
  std::array<backend::MatmulTask, backend::CpuBackend::kMaxMatmulTasks> tasks;
  for (size_t w0 = 0; w0 < n_used; w0 += kWave) {
    const size_t n = std::min(kWave, n_used - w0);
    WaveLeases leases(*experts_, il, ws.wave_ids.data());
    bool same_rows = true;
    for (size_t i = 0; i < n; ++i) {
      const int32_t e = ws.used[w0 + i];
      ws.wave_views[i] = leases.acquire(e);
      same_rows = same_rows && ws.expert_count[static_cast<size_t>(e)] ==
                                   ws.expert_count[static_cast<size_t>(ws.used[w0])];
    }
    const auto start = [&](size_t i) {
      return static_cast<int64_t>(ws.expert_start[static_cast<size_t>(ws.used[w0 + i])]);
    };
    const auto rows = [&](size_t i) {
      return static_cast<int64_t>(ws.expert_count[static_cast<size_t>(ws.used[w0 + i])]);
    };
    const auto gate_up = [&](size_t i) {
      const ExpertView& v = ws.wave_views[i];
      const float* x = ws.xg.data() + start(i) * H;
      return std::array<backend::MatmulTask, 2>{
          backend::MatmulTask{backend::Weight{v.gate_type, v.gate, H, F}, x, ws.gate.data() + start(i) * F},
          backend::MatmulTask{backend::Weight{v.up_type, v.up, H, F}, x, ws.up.data() + start(i) * F}};
    };
    const auto down = [&](size_t i) {
      const ExpertView& v = ws.wave_views[i];
      return backend::MatmulTask{backend::Weight{v.down_type, v.down, F, H}, ws.act.data() + start(i) * F,
                                 ws.down.data() + start(i) * H};
    };
    const auto activate = [&](size_t i) {
      const int64_t e = ws.used[w0 + i], r0 = start(i), nr = rows(i);
      gpt_oss::add_bias_rows(ws.gate.data() + r0 * F, l.gate_bias + e * F, nr, F);
      gpt_oss::add_bias_rows(ws.up.data() + r0 * F, l.up_bias + e * F, nr, F);
      gpt_oss::swiglu_oai(ws.gate.data() + r0 * F, ws.up.data() + r0 * F, nr * F, kOaiAlpha, kOaiLimit,
                          ws.act.data() + r0 * F);
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
      const int64_t e = ws.used[w0 + i];
      gpt_oss::add_bias_rows(ws.down.data() + start(i) * H, l.down_bias + e * H, rows(i), H);
    }
  }
}

}  // namespace df::models

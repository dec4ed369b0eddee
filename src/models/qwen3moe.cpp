// qwen3moe forward pass (ARCHITECTURES.md 2.3), written against the backend ops. One batch of T tokens goes
// through every layer together; each MoE layer routes all T tokens, then acquires each chosen expert once
// and applies it to the tokens routed to it, a wave of k experts at a time (run_experts). All buffers live
// in the state and grow only when a batch is larger than any before, so decoding allocates nothing.
#include "models/qwen3moe.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace df::models {

// Buffers for a batch of up to `rows` tokens.
struct Qwen3MoeModel::Workspace {
  int64_t rows = 0;
  std::vector<int32_t> pos;
  std::vector<float> x, xn, mix, q, k, v, att;
  std::vector<float> router_logits, expert_weights, expert_out, moe;
  std::vector<int32_t> expert_ids;
  // Per-expert batches: the (token, slot) entries routed to each expert, grouped by expert, and the token
  // of each of those entries.
  std::vector<int32_t> expert_count, expert_start, expert_entries, entry_tokens, used;
  // One wave of experts: the ids held and the FFNs handed to the backend.
  std::vector<int32_t> wave_ids;
  std::vector<backend::SwigluFfnTask> wave;
  // Prefetch guesses.
  std::vector<float> guess_xn, guess_logits, guess_weights;
  std::vector<int32_t> guess_ids, guess_list;
  std::vector<uint8_t> guess_mask;
  std::vector<uint8_t> scratch;
  std::vector<float> attn_scratch;
};

class Qwen3MoeModel::State final : public ModelState {
 public:
  State(const Qwen3MoeModel& model, int n_ctx) : model_(&model), n_ctx_(n_ctx) {
    const auto& c = model.cfg_;
    const size_t kv_row = static_cast<size_t>(c.n_head_kv) * static_cast<size_t>(c.head_dim);
    k.resize(static_cast<size_t>(c.n_layer));
    v.resize(static_cast<size_t>(c.n_layer));
    for (size_t il = 0; il < static_cast<size_t>(c.n_layer); ++il) {
      k[il].assign(kv_row * static_cast<size_t>(n_ctx), 0);
      v[il].assign(kv_row * static_cast<size_t>(n_ctx), 0);
    }
    ws.attn_scratch.resize(model.backend_->attention_scratch_floats(n_ctx, c.head_dim));
  }

  int n_ctx() const override { return n_ctx_; }
  // The KV cache needs no clearing: attention reads only positions below n_past + T.
  void reset() override { n_past = 0; }
  size_t bytes() const override {
    size_t total = ws.attn_scratch.size() * sizeof(float) + ws.scratch.size();
    for (size_t il = 0; il < k.size(); ++il) total += (k[il].size() + v[il].size()) * sizeof(uint16_t);
    for (const auto* b :
         {&ws.x, &ws.xn, &ws.mix, &ws.q, &ws.k, &ws.v, &ws.att, &ws.router_logits, &ws.expert_weights,
          &ws.expert_out, &ws.moe, &ws.guess_xn, &ws.guess_logits, &ws.guess_weights})
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
    ws.expert_out.resize(t * K * H);
    ws.expert_entries.resize(t * K);
    ws.entry_tokens.resize(t * K);
    ws.expert_count.resize(E);
    ws.expert_start.resize(E + 1);
    ws.used.resize(E);
    ws.guess_list.resize(E);
    ws.guess_mask.resize(E);
    ws.wave_ids.resize(K);
    ws.wave.resize(K);
    ws.scratch.resize(t * model_->max_act_row_bytes_);
    ws.rows = T;
  }

  const Qwen3MoeModel* model_;
  int n_ctx_;
  std::vector<std::vector<uint16_t>> k, v;  // per layer
  Workspace ws;
};

std::unique_ptr<ModelState> Qwen3MoeModel::new_state(int n_ctx) {
  if (n_ctx < 1) fail("qwen3moe: context size {} must be at least 1", n_ctx);
  return std::make_unique<State>(*this, n_ctx);
}

void Qwen3MoeModel::matmul(State& st, const backend::Weight& w, const float* x, int64_t rows, float* y) {
  backend_->matmul(w, x, rows, y, st.ws.scratch);
}

backend::RouterParams Qwen3MoeModel::router_params() const {
  backend::RouterParams p;
  p.gating = backend::Gating::Softmax;
  p.n_expert = cfg_.n_expert;
  p.k = cfg_.n_expert_used;
  p.selection_bias = nullptr;
  p.normalize = true;  // qwen3moe renormalises the top-k weights (build_moe_ffn norm_w = true)
  p.scale = cfg_.expert_weights_scale;
  return p;
}

void Qwen3MoeModel::forward(ModelState& state, std::span<const int32_t> tokens, std::span<float> logits,
                            bool all_rows, ForwardCapture* capture) {
  auto* st = dynamic_cast<State*>(&state);
  if (!st || st->model_ != this) fail("qwen3moe: forward() was given a state made by another model");
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) fail("qwen3moe: forward() needs at least one token");
  if (st->n_past < 0 || st->n_past + T > st->n_ctx())
    fail("qwen3moe: context full: {} positions used + {} new tokens > context size {}", st->n_past, T,
         st->n_ctx());
  const size_t want = static_cast<size_t>(all_rows ? T : 1) * static_cast<size_t>(cfg_.n_vocab);
  if (logits.size() != want)
    fail("qwen3moe: logits buffer holds {} floats, {} expected ({} rows of {})", logits.size(), want,
         all_rows ? T : 1, cfg_.n_vocab);
  for (int32_t id : tokens)
    if (id < 0 || id >= cfg_.n_vocab)
      fail("qwen3moe: token id {} is out of range (vocabulary of {})", id, cfg_.n_vocab);

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

void Qwen3MoeModel::run_layer(State& st, int il, int64_t T, ForwardCapture* capture) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  Workspace& ws = st.ws;
  const int64_t H = cfg_.n_embd, hd = cfg_.head_dim;
  backend::Backend& be = *backend_;

  be.rms_norm(ws.x.data(), T, H, l.attn_norm, cfg_.eps, ws.xn.data());
  const backend::MatmulTask qkv[] = {{l.wq, ws.xn.data(), ws.q.data()},
                                     {l.wk, ws.xn.data(), ws.k.data()},
                                     {l.wv, ws.xn.data(), ws.v.data()}};
  backend_->matmul_many(qkv, T);
  be.rms_norm(ws.q.data(), T * cfg_.n_head, hd, l.q_norm, cfg_.eps, ws.q.data());
  be.rms_norm(ws.k.data(), T * cfg_.n_head_kv, hd, l.k_norm, cfg_.eps, ws.k.data());
  be.rope_neox(ws.q.data(), T, cfg_.n_head, cfg_.head_dim, cfg_.head_dim, ws.pos.data(), cfg_.rope_theta,
               cfg_.rope_freq_scale);
  be.rope_neox(ws.k.data(), T, cfg_.n_head_kv, cfg_.head_dim, cfg_.head_dim, ws.pos.data(), cfg_.rope_theta,
               cfg_.rope_freq_scale);
  const backend::KvCacheView kv = st.kv(il);
  be.kv_store(kv, ws.k.data(), ws.v.data(), T, st.n_past);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  be.attention(kv, ws.q.data(), T, st.n_past, cfg_.n_head, scale, ws.att.data(), ws.attn_scratch);
  matmul(st, l.wo, ws.att.data(), T, ws.mix.data());
  be.add(ws.x.data(), ws.mix.data(), T * H);

  run_moe(st, il, T, capture);
}

// The seed's prefetch rule: the routers of the next MoE layers applied to the current (post-attention)
// state. Only the provider sees the result.
void Qwen3MoeModel::prefetch_guesses(State& st, int il, int64_t T) {
  Workspace& ws = st.ws;
  const int64_t H = cfg_.n_embd, K = cfg_.n_expert_used;
  for (int ahead = 1; ahead <= prefetch_lookahead_ && il + ahead < cfg_.n_layer; ++ahead) {
    const int target = il + ahead;
    const Layer& g = layers_[static_cast<size_t>(target)];
    backend_->rms_norm(ws.x.data(), T, H, g.ffn_norm, cfg_.eps, ws.guess_xn.data());
    matmul(st, g.router, ws.guess_xn.data(), T, ws.guess_logits.data());
    backend_->route(router_params(), ws.guess_logits.data(), T, ws.guess_ids.data(), ws.guess_weights.data());
    std::fill(ws.guess_mask.begin(), ws.guess_mask.end(), 0);
    for (int64_t i = 0; i < T * K; ++i)
      ws.guess_mask[static_cast<size_t>(ws.guess_ids[static_cast<size_t>(i)])] = 1;
    size_t n = 0;
    for (int e = 0; e < cfg_.n_expert; ++e)
      if (ws.guess_mask[static_cast<size_t>(e)]) ws.guess_list[n++] = e;
    experts_->prefetch(target, std::span<const int32_t>(ws.guess_list.data(), n));
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

void Qwen3MoeModel::run_moe(State& st, int il, int64_t T, ForwardCapture* capture) {
  const Layer& l = layers_[static_cast<size_t>(il)];
  Workspace& ws = st.ws;
  backend::Backend& be = *backend_;
  const int64_t H = cfg_.n_embd, K = cfg_.n_expert_used, E = cfg_.n_expert;

  prefetch_guesses(st, il, T);

  be.rms_norm(ws.x.data(), T, H, l.ffn_norm, cfg_.eps, ws.xn.data());
  matmul(st, l.router, ws.xn.data(), T, ws.router_logits.data());
  be.route(router_params(), ws.router_logits.data(), T, ws.expert_ids.data(), ws.expert_weights.data());

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

  run_experts(st, il, T, n_used);

  be.moe_combine(ws.expert_out.data(), ws.expert_weights.data(), T, static_cast<int>(K), H, ws.moe.data());
  be.add(ws.x.data(), ws.moe.data(), T * H);

  if (capture) {
    const size_t off = static_cast<size_t>(il) * static_cast<size_t>(T * K);
    std::copy_n(ws.expert_ids.data(), T * K, capture->expert_ids.data() + off);
    std::copy_n(ws.expert_weights.data(), T * K, capture->expert_weights.data() + off);
  }
}

// The chosen experts (ws.used[0..n_used)), each applied to its tokens: expert_out row (token · K + slot)
// gets its output for that token. The experts go in waves of k: acquire the wave's experts, run them as
// one swiglu_ffn (one parallel job over every expert of the wave, so that a decode step's k small experts
// keep every thread busy), release them. will_acquire() has announced the whole layer beforehand, so a
// disk provider reads every expert of the layer at once; a wave never pins more than the k experts a
// decode step needs anyway.
void Qwen3MoeModel::run_experts(State& st, int il, int64_t T, size_t n_used) {
  Workspace& ws = st.ws;
  const int64_t H = cfg_.n_embd, F = cfg_.n_ff_exp;
  const size_t wave_size = static_cast<size_t>(cfg_.n_expert_used);
  experts_->will_acquire(il, std::span<const int32_t>(ws.used.data(), n_used));
  for (size_t w0 = 0; w0 < n_used; w0 += wave_size) {
    const size_t n = std::min(wave_size, n_used - w0);
    WaveLeases leases(*experts_, il, ws.wave_ids.data());
    for (size_t i = 0; i < n; ++i) {
      const int32_t e = ws.used[w0 + i];
      const ExpertView v = leases.acquire(e);
      const size_t start = static_cast<size_t>(ws.expert_start[static_cast<size_t>(e)]);
      backend::SwigluFfnTask& task = ws.wave[i];
      task.gate = backend::Weight{v.gate_type, v.gate, H, F};
      task.up = backend::Weight{v.up_type, v.up, H, F};
      task.down = backend::Weight{v.down_type, v.down, F, H};
      task.in_rows = ws.entry_tokens.data() + start;
      task.out_rows = ws.expert_entries.data() + start;
      task.n_rows = ws.expert_count[static_cast<size_t>(e)];
    }
    backend_->swiglu_ffn(std::span<const backend::SwigluFfnTask>(ws.wave.data(), n), ws.xn.data(), T,
                         ws.expert_out.data());
  }
}

}  // namespace df::models

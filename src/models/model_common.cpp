#include "models/model_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gguf/gguf.h"
#include "models/moe_block.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {

void check_forward_args(std::string_view arch, const ModelState& st, std::span<const int32_t> tokens,
                        std::span<const float> logits, bool all_rows, int n_vocab) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) fail("{}: forward() needs at least one token", arch);
  if (st.n_past < 0 || st.n_past + T > st.n_ctx())
    fail("{}: context full: {} positions used + {} new tokens > context size {}", arch, st.n_past, T,
         st.n_ctx());
  const size_t want = static_cast<size_t>(all_rows ? T : 1) * static_cast<size_t>(n_vocab);
  if (logits.size() != want)
    fail("{}: logits buffer holds {} floats, {} expected ({} rows of {})", arch, logits.size(), want,
         all_rows ? T : 1, n_vocab);
  for (int32_t id : tokens)
    if (id < 0 || id >= n_vocab)
      fail("{}: token id {} is out of range (vocabulary of {})", arch, id, n_vocab);
}

void Model::queue_greedy(ModelState&, int32_t, int) {
  fail("{}: this model cannot queue greedy steps ahead (a layer split): decode one token at a time",
       info().arch);
}

int32_t Model::greedy_token(int) {
  fail("{}: this model cannot queue greedy steps ahead (a layer split): decode one token at a time",
       info().arch);
}

uint64_t step_key(const SequenceBatch& batch, size_t n_logits) {
  // FNV-1a over the fields: a key only has to differ when they do.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  for (const BatchSegment& s : batch.segments) {
    mix(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s.state)));
    mix(static_cast<uint64_t>(s.rows));
    mix(static_cast<uint64_t>(s.logit_rows));
  }
  mix(static_cast<uint64_t>(n_logits));
  mix(batch.greedy_slot >= 0 ? 1u : 0u);  // a greedy step ends with the argmax
  return h;
}

void begin_capture(ForwardCapture* capture, size_t n_moe, int64_t T, int k, int n_layer, int64_t n_embd) {
  if (!capture) return;
  const size_t moe_entries = n_moe * static_cast<size_t>(T * k);
  capture->expert_ids.assign(moe_entries, -1);
  capture->expert_weights.assign(moe_entries, 0.0f);
  if (capture->want_layers) capture->l_out.assign(static_cast<size_t>(n_layer * T * n_embd), 0.0f);
}

void capture_layer(backend::Backend& be, ForwardCapture* capture, int il, backend::Buf<const float> x,
                   int64_t T, int64_t n_embd) {
  if (capture && capture->want_layers)
    be.download(capture->l_out.data() + static_cast<size_t>(il) * static_cast<size_t>(T * n_embd), x,
                static_cast<size_t>(T * n_embd));
}

void attend_segments(backend::Backend& be, const SequenceBatch& batch, int il,
                     const backend::AttentionParams& p, int64_t q_dim, int64_t kv_dim) {
  const TrunkBuffers& b = batch.work->trunk;
  for (const BatchSegment& s : batch.segments) {
    const backend::KvCacheView kv = s.state->layers.kv(il);
    const size_t q0 = static_cast<size_t>(s.row0 * q_dim), qn = static_cast<size_t>(s.rows * q_dim);
    const size_t k0 = static_cast<size_t>(s.row0 * kv_dim), kn = static_cast<size_t>(s.rows * kv_dim);
    be.kv_store(kv, b.k.view().sub(k0, kn), b.v.view().sub(k0, kn), s.rows, s.n_past);
    // The scratch of the segment's own state: it is sized for that state's context.
    be.attention(kv, b.q.view().sub(q0, qn), s.rows, s.n_past, p, b.att.view().sub(q0, qn),
                 s.state->trunk.attn_scratch.view());
  }
}

void qk_norm_attention(backend::Backend& be, const QkNormAttention& a, const SequenceBatch& batch, int il,
                       backend::Buf<const float> attn_norm) {
  TrunkBuffers& b = batch.work->trunk;
  const int64_t hd = a.head_dim, T = batch.T;
  const backend::MatmulTask qkv[] = {{a.wq, b.xn.view(), b.q.view()},
                                     {a.wk, b.xn.view(), b.k.view()},
                                     {a.wv, b.xn.view(), b.v.view()},
                                     {a.wgate ? *a.wgate : a.wq, b.xn.view(), a.gate}};
  const std::span<const backend::MatmulTask> products(qkv, a.wgate ? 4 : 3);
  if (attn_norm)
    be.norm_matmul_many(b.x.view(), T, a.wq.n_in, attn_norm, a.eps, b.xn.view(), products);
  else
    be.matmul_many(products, T);
  backend::RopeParams rope;
  rope.n_rot = a.n_rot;
  rope.freq_base = a.rope_theta;
  rope.freq_scale = a.rope_freq_scale;
  const backend::NormRopeTask qk[] = {{b.q.view(), a.n_head, a.q_norm}, {b.k.view(), a.n_head_kv, a.k_norm}};
  be.norm_rope(qk, T, a.head_dim, a.eps, b.pos.view(), rope);
  backend::AttentionParams ap;
  ap.n_head = a.n_head;
  ap.scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  attend_segments(be, batch, il, ap, a.n_head * hd, a.n_head_kv * hd);
  if (a.wgate) be.mul_sigmoid(b.att.view(), a.gate, T, a.n_head * hd, a.n_head * hd);
  be.matmul_add(a.wo, b.att.view(), T, b.mix.view(), b.x.view(), b.scratch.view());
}

void dense_ffn(backend::Backend& be, const backend::Weight& gate, const backend::Weight& up,
               const backend::Weight& down, const backend::ActivationParams& act, backend::Buf<const float> x,
               int64_t T, backend::Buf<float> out) {
  backend::FfnTask task;
  task.gate = gate;
  task.up = up;
  task.down = down;
  task.n_rows = T;
  be.ffn(std::span(&task, 1), act, x, T, out);
}

void shared_expert(backend::Backend& be, TrunkBuffers& b, const SharedExpert& s, int64_t T, int64_t n_embd) {
  dense_ffn(be, s.gate, s.up, s.down, backend::ActivationParams{}, b.xn.view(), T, b.mix.view());
  if (s.gate_inp) {
    be.matmul(*s.gate_inp, b.xn.view(), T, s.gate_out, b.scratch.view());
    be.mul_sigmoid(b.mix.view(), s.gate_out, T, n_embd, 1);
  }
}

void ActRowBytes::widen(GgmlType t, int64_t n_in) {
  bytes_ = std::max(bytes_, be_.matmul_scratch_bytes(t, n_in, 1));
}

void ActRowBytes::add(const backend::Weight& w) {
  if (w.data) widen(w.type, w.n_in);
}

void ActRowBytes::add(const ExpertLayout& layout) {
  for (const auto& el : layout.layers) {
    widen(el.gate_type, el.n_embd);
    widen(el.up_type, el.n_embd);
    widen(el.down_type, el.n_ff);
  }
}

std::unique_ptr<ExpertProvider> make_expert_provider(const gguf::File& file, const LoadOptions& options,
                                                     const ExpertLayout& layout, backend::Backend& backend,
                                                     int first_layer, int end_layer) {
  auto experts = options.make_expert_provider ? options.make_expert_provider(file, layout)
                                              : std::make_unique<ResidentExpertProvider>(
                                                    file, layout, backend, first_layer, end_layer);
  if (!experts) fail("{}: the expert provider factory returned nothing", file.path());
  return experts;
}

}  // namespace df::models

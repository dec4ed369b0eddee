#include "models/model_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gguf/gguf.h"
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

void begin_capture(ForwardCapture* capture, size_t n_moe, int64_t T, int k, int n_layer, int64_t n_embd) {
  if (!capture) return;
  const size_t moe_entries = n_moe * static_cast<size_t>(T * k);
  capture->expert_ids.assign(moe_entries, -1);
  capture->expert_weights.assign(moe_entries, 0.0f);
  if (capture->want_layers) capture->l_out.assign(static_cast<size_t>(n_layer * T * n_embd), 0.0f);
}

void capture_layer(ForwardCapture* capture, int il, const float* x, int64_t T, int64_t n_embd) {
  if (capture && capture->want_layers)
    std::copy_n(x, T * n_embd,
                capture->l_out.data() + static_cast<size_t>(il) * static_cast<size_t>(T * n_embd));
}

void qk_norm_attention(backend::Backend& be, const QkNormAttention& a, const backend::KvCacheView& kv,
                       int n_past, int64_t T, TrunkBuffers& b) {
  const int64_t hd = a.head_dim;
  const backend::MatmulTask qkv[] = {
      {a.wq, b.xn.data(), b.q.data()}, {a.wk, b.xn.data(), b.k.data()}, {a.wv, b.xn.data(), b.v.data()}};
  be.matmul_many(qkv, T);
  be.rms_norm(b.q.data(), T * a.n_head, hd, a.q_norm, a.eps, b.q.data());
  be.rms_norm(b.k.data(), T * a.n_head_kv, hd, a.k_norm, a.eps, b.k.data());
  backend::RopeParams rope;
  rope.n_rot = a.n_rot;
  rope.freq_base = a.rope_theta;
  rope.freq_scale = a.rope_freq_scale;
  be.rope(b.q.data(), T, a.n_head, a.head_dim, b.pos.data(), rope);
  be.rope(b.k.data(), T, a.n_head_kv, a.head_dim, b.pos.data(), rope);
  be.kv_store(kv, b.k.data(), b.v.data(), T, n_past);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  be.attention(kv, b.q.data(), T, n_past, backend::AttentionParams{a.n_head, scale}, b.att.data(),
               b.attn_scratch);
  be.matmul(a.wo, b.att.data(), T, b.mix.data(), b.scratch);
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
                                                     const ExpertLayout& layout,
                                                     const backend::Backend& backend) {
  auto experts = options.make_expert_provider
                     ? options.make_expert_provider(file, layout)
                     : std::make_unique<ResidentExpertProvider>(file, layout, backend);
  if (!experts) fail("{}: the expert provider factory returned nothing", file.path());
  return experts;
}

}  // namespace df::models

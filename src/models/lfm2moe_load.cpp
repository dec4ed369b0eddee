// lfm2moe weight binding (ARCHITECTURES.md 3.2): every dense tensor checked for presence, shape and type,
// then read into RAM; the routed experts are described to the expert provider, which loads them.
#include <fmt/format.h>

#include "gguf/gguf.h"
#include "models/lfm2moe.h"
#include "models/model_common.h"
#include "models/weight_loader.h"

namespace df::models {

Lfm2MoeModel::Lfm2MoeModel(const gguf::File& file, const LoadOptions& options)
    : MoeModelBase(options), cfg_(lfm2moe_config(file)) {
  state_dims_ = state_dims_of(cfg_);
  const int64_t H = cfg_.n_embd, hd = cfg_.head_dim;
  const int64_t q_dim = static_cast<int64_t>(cfg_.n_head) * hd,
                kv_dim = static_cast<int64_t>(cfg_.n_head_kv) * hd;
  WeightLoader w(file, *backend_, "lfm2moe");

  tok_embd_ = w.table("token_embd.weight", H, cfg_.n_vocab);
  output_norm_ = w.f32(w.first_present({"token_embd_norm.weight", "output_norm.weight"}), {H});
  output_ = w.has("output.weight") ? w.matrix("output.weight", H, cfg_.n_vocab) : tok_embd_;

  const auto blk = [](int il, const char* name) { return fmt::format("blk.{}.{}", il, name); };
  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  for (int il = 0; il < cfg_.n_layer; ++il) {
    Layer& l = layers_[static_cast<size_t>(il)];
    l.attn_norm = w.f32(blk(il, "attn_norm.weight"), {H});
    l.ffn_norm = w.f32(blk(il, "ffn_norm.weight"), {H});
    if (cfg_.attn[static_cast<size_t>(il)]) {
      l.wq = w.matrix(blk(il, "attn_q.weight"), H, q_dim);
      l.wk = w.matrix(blk(il, "attn_k.weight"), H, kv_dim);
      l.wv = w.matrix(blk(il, "attn_v.weight"), H, kv_dim);
      l.wo = w.matrix(blk(il, "attn_output.weight"), q_dim, H);
      l.q_norm = w.f32(blk(il, "attn_q_norm.weight"), {hd});
      l.k_norm = w.f32(blk(il, "attn_k_norm.weight"), {hd});
    } else {
      l.in_proj = w.matrix(blk(il, "shortconv.in_proj.weight"), H, 3 * H);
      l.conv = w.f32(blk(il, "shortconv.conv.weight"), {cfg_.l_cache, H});
      l.out_proj = w.matrix(blk(il, "shortconv.out_proj.weight"), H, H);
    }
    if (il < cfg_.n_dense_lead) {
      const int64_t ff = cfg_.n_ff[static_cast<size_t>(il)];
      l.ffn_gate = w.matrix(blk(il, "ffn_gate.weight"), H, ff);
      l.ffn_up = w.matrix(blk(il, "ffn_up.weight"), H, ff);
      l.ffn_down = w.matrix(blk(il, "ffn_down.weight"), ff, H);
      continue;
    }
    const int64_t E = cfg_.n_expert, F = cfg_.n_ff_exp;
    l.moe_index = static_cast<int>(expert_layout_.layers.size());
    l.router = w.matrix(blk(il, "ffn_gate_inp.weight"), H, E);
    l.selection_bias = w.f32(w.first_present({blk(il, "exp_probs_b.bias"), blk(il, "exp_probs_b")}), {E});
    expert_layout_.layers.push_back(expert_layer_layout(w, il, cfg_.n_expert, H, F));
  }

  // Activation scratch is sized once for the widest row any matmul quantizes.
  ActRowBytes act_row(*backend_);
  for (const Layer& l : layers_)
    for (const backend::Weight* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.in_proj, &l.out_proj, &l.ffn_gate,
                                     &l.ffn_up, &l.ffn_down, &l.router})
      act_row.add(*m);
  finish_load(file, options, w, act_row);

  info_ = moe_model_info("lfm2moe", cfg_, expert_layout_, cfg_.attn, cfg_.rope_theta);
}

std::unique_ptr<Model> load_lfm2moe(const gguf::File& file, const LoadOptions& options) {
  return std::make_unique<Lfm2MoeModel>(file, options);
}

}  // namespace df::models

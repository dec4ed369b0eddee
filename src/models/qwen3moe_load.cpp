// qwen3moe weight binding (ARCHITECTURES.md 2.2): every dense tensor checked for presence, shape and type,
// then read into RAM; the routed experts are described to the expert provider, which loads them.
#include <fmt/format.h>

#include "gguf/gguf.h"
#include "models/model_common.h"
#include "models/qwen3moe.h"
#include "models/weight_loader.h"

namespace df::models {

Qwen3MoeModel::Qwen3MoeModel(const gguf::File& file, const LoadOptions& options)
    : MoeModelBase(options), cfg_(qwen3moe_config(file)) {
  state_dims_ = state_dims_of(cfg_);
  const int64_t H = cfg_.n_embd, hd = cfg_.head_dim, E = cfg_.n_expert, F = cfg_.n_ff_exp;
  const int64_t q_dim = static_cast<int64_t>(cfg_.n_head) * hd,
                kv_dim = static_cast<int64_t>(cfg_.n_head_kv) * hd;
  WeightLoader w(file, *backend_, "qwen3moe");

  tok_embd_ = w.table("token_embd.weight", H, cfg_.n_vocab);
  output_norm_ = w.f32("output_norm.weight", {H});
  output_ = w.has("output.weight") ? w.matrix("output.weight", H, cfg_.n_vocab) : tok_embd_;

  const auto blk = [](int il, const char* name) { return fmt::format("blk.{}.{}", il, name); };
  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  for (int il = 0; il < cfg_.n_layer; ++il) {
    Layer& l = layers_[static_cast<size_t>(il)];
    l.attn_norm = w.f32(blk(il, "attn_norm.weight"), {H});
    l.wq = w.matrix(blk(il, "attn_q.weight"), H, q_dim);
    l.wk = w.matrix(blk(il, "attn_k.weight"), H, kv_dim);
    l.wv = w.matrix(blk(il, "attn_v.weight"), H, kv_dim);
    l.wo = w.matrix(blk(il, "attn_output.weight"), q_dim, H);
    l.q_norm = w.f32(blk(il, "attn_q_norm.weight"), {hd});
    l.k_norm = w.f32(blk(il, "attn_k_norm.weight"), {hd});
    l.ffn_norm = w.f32(blk(il, "ffn_norm.weight"), {H});
    l.router = w.matrix(blk(il, "ffn_gate_inp.weight"), H, E);

    expert_layout_.layers.push_back(expert_layer_layout(w, il, cfg_.n_expert, H, F));
  }

  // Activation scratch is sized once for the widest row any matmul quantizes.
  ActRowBytes act_row(*backend_);
  for (const Layer& l : layers_)
    for (const backend::Weight* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.router}) act_row.add(*m);
  finish_load(file, options, w, act_row);

  info_ = moe_model_info("qwen3moe", cfg_, expert_layout_,
                         std::vector<bool>(static_cast<size_t>(cfg_.n_layer), true), cfg_.rope_theta);
}

std::unique_ptr<Model> load_qwen3moe(const gguf::File& file, const LoadOptions& options) {
  return std::make_unique<Qwen3MoeModel>(file, options);
}

}  // namespace df::models

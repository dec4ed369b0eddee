// gpt-oss weight binding (ARCHITECTURES.md 7.3): every dense tensor checked for presence, shape and type,
// then read into RAM; the routed experts' matrices are described to the expert provider, which loads them.
// The per-expert biases are small ({n_ff or n_embd} floats per expert) and stay resident with the trunk.
#include <fmt/format.h>

#include "gguf/gguf.h"
#include "models/gpt_oss.h"
#include "models/model_common.h"
#include "models/weight_loader.h"

namespace df::models {

GptOssModel::GptOssModel(const gguf::File& file, const LoadOptions& options)
    : MoeModelBase(options), cfg_(gpt_oss_config(file)) {
  state_dims_ = state_dims_of(cfg_);
  const int64_t H = cfg_.n_embd, hd = cfg_.head_dim, E = cfg_.n_expert, F = cfg_.n_ff_exp;
  const int64_t q_dim = static_cast<int64_t>(cfg_.n_head) * hd,
                kv_dim = static_cast<int64_t>(cfg_.n_head_kv) * hd;
  WeightLoader w(file, *backend_, "gpt-oss");

  tok_embd_ = w.table("token_embd.weight", H, cfg_.n_vocab);
  output_norm_ = w.f32("output_norm.weight", {H});
  output_ = w.matrix("output.weight", H, cfg_.n_vocab);  // gpt-oss's head is never tied

  const auto blk = [](int il, const char* name) { return fmt::format("blk.{}.{}", il, name); };
  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  for (int il = 0; il < cfg_.n_layer; ++il) {
    Layer& l = layers_[static_cast<size_t>(il)];
    l.attn_norm = w.f32(blk(il, "attn_norm.weight"), {H});
    l.wq = w.matrix(blk(il, "attn_q.weight"), H, q_dim);
    l.bq = w.f32(blk(il, "attn_q.bias"), {q_dim});
    l.wk = w.matrix(blk(il, "attn_k.weight"), H, kv_dim);
    l.bk = w.f32(blk(il, "attn_k.bias"), {kv_dim});
    l.wv = w.matrix(blk(il, "attn_v.weight"), H, kv_dim);
    l.bv = w.f32(blk(il, "attn_v.bias"), {kv_dim});
    l.wo = w.matrix(blk(il, "attn_output.weight"), q_dim, H);
    l.bo = w.f32(blk(il, "attn_output.bias"), {H});
    l.sinks = w.f32(blk(il, "attn_sinks.weight"), {cfg_.n_head});
    l.post_attn_norm = w.f32(blk(il, "post_attention_norm.weight"), {H});
    l.router = w.matrix(blk(il, "ffn_gate_inp.weight"), H, E);
    l.router_bias = w.f32(blk(il, "ffn_gate_inp.bias"), {E});
    l.gate_bias = w.f32(blk(il, "ffn_gate_exps.bias"), {F, E});
    l.up_bias = w.f32(blk(il, "ffn_up_exps.bias"), {F, E});
    l.down_bias = w.f32(blk(il, "ffn_down_exps.bias"), {H, E});

    expert_layout_.layers.push_back(expert_layer_layout(w, il, cfg_.n_expert, H, F));
  }

  // Activation scratch is sized once for the widest row any single matmul quantizes.
  ActRowBytes act_row(*backend_);
  for (const Layer& l : layers_)
    for (const backend::Weight* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.router}) act_row.add(*m);
  finish_load(file, options, w, act_row);

  info_ = moe_model_info("gpt-oss", cfg_, expert_layout_,
                         std::vector<bool>(static_cast<size_t>(cfg_.n_layer), true), cfg_.rope.freq_base);
}

std::unique_ptr<Model> load_gpt_oss(const gguf::File& file, const LoadOptions& options) {
  return std::make_unique<GptOssModel>(file, options);
}

}  // namespace df::models

// qwen3moe weight binding (ARCHITECTURES.md 2.2): every tensor of qwen3moe_tensors() checked for presence,
// shape and type; dense ones are read into RAM, the routed experts are described to the expert provider,
// which loads them.
#include "gguf/gguf.h"
#include "models/model_common.h"
#include "models/qwen3moe.h"
#include "models/qwen3moe_tensors.h"
#include "models/tensor_binding.h"
#include "models/weight_loader.h"

namespace df::models {
namespace {

TensorTarget layer_target(Qwen3MoeModel::Layer& l, TensorKind kind) {
  switch (kind) {
    case TensorKind::attn_norm:
      return {.f32 = &l.attn_norm};
    case TensorKind::ffn_norm:
      return {.f32 = &l.ffn_norm};
    case TensorKind::attn_q:
      return {.weight = &l.wq};
    case TensorKind::attn_k:
      return {.weight = &l.wk};
    case TensorKind::attn_v:
      return {.weight = &l.wv};
    case TensorKind::attn_output:
      return {.weight = &l.wo};
    case TensorKind::attn_q_norm:
      return {.f32 = &l.q_norm};
    case TensorKind::attn_k_norm:
      return {.f32 = &l.k_norm};
    case TensorKind::router:
      return {.weight = &l.router};
    default:
      return {};  // experts: the layout
  }
}

}  // namespace

Qwen3MoeModel::Qwen3MoeModel(const gguf::File& file, const LoadOptions& options)
    : MoeModelBase(options), cfg_(qwen3moe_config(file)) {
  state_dims_ = state_dims_of(cfg_);
  WeightLoader w(file, *backend_, std::string(kQwen3MoeArch));
  TensorBinder bind(w, expert_layout_, kQwen3MoeArch);

  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  bool untied = false;
  for (const TensorDesc& t : qwen3moe_tensors(cfg_)) {
    if (t.kind == TensorKind::token_embd)
      bind.bind(t, {.weight = &tok_embd_});
    else if (t.kind == TensorKind::output_norm)
      bind.bind(t, {.f32 = &output_norm_});
    else if (t.kind == TensorKind::output)
      untied = bind.bind(t, {.weight = &output_});
    else
      bind.bind(t, layer_target(layers_[static_cast<size_t>(t.layer)], t.kind));
  }
  if (!untied) output_ = tok_embd_;

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

// lfm2moe weight binding (ARCHITECTURES.md 3.2): every tensor of lfm2moe_tensors() checked for presence,
// shape and type; dense ones are read into RAM, the routed experts are described to the expert provider,
// which loads them.
#include <fmt/format.h>

#include "gguf/gguf.h"
#include "models/lfm2moe.h"
#include "models/lfm2moe_tensors.h"
#include "models/model_common.h"
#include "models/tensor_binding.h"
#include "models/weight_loader.h"

namespace df::models {
namespace {

TensorTarget layer_target(Lfm2MoeModel::Layer& l, TensorKind kind) {
  switch (kind) {
    case TensorKind::conv:
      return {.f32 = &l.conv};
    case TensorKind::conv_in_proj:
      return {.weight = &l.in_proj};
    case TensorKind::conv_out_proj:
      return {.weight = &l.out_proj};
    case TensorKind::ffn_gate:
      return {.weight = &l.ffn_gate};
    case TensorKind::ffn_up:
      return {.weight = &l.ffn_up};
    case TensorKind::ffn_down:
      return {.weight = &l.ffn_down};
    case TensorKind::selection_bias:
      return {.f32 = &l.selection_bias};
    default:
      return qk_norm_layer_target(l, kind);  // experts (an empty target): the layout
  }
}

}  // namespace

Lfm2MoeModel::Lfm2MoeModel(const gguf::File& file, const LoadOptions& options)
    : MoeModelBase(options), cfg_(lfm2moe_config(file)) {
  state_dims_ = state_dims_of(cfg_, held_layers());
  WeightLoader w(file, *backend_, std::string(kLfm2MoeArch));
  TensorBinder bind(w, expert_layout_, kLfm2MoeArch);

  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  if (!bind_tensors(bind, lfm2moe_tensors(cfg_), layers_, layer_target))
    output_ = tok_embd_;  // no output.weight: the head is token_embd
  number_moe_layers(layers_);

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

// hy_v3 weight binding (ARCHITECTURES.md 6.2): every tensor of hy_v3_tensors() checked for presence, shape
// and type; dense ones (the shared experts among them) are read into the backend's memory, the routed experts
// are described to the expert provider, which loads them.
#include "gguf/gguf.h"
#include "models/hy_v3.h"
#include "models/hy_v3_tensors.h"
#include "models/model_common.h"
#include "models/tensor_binding.h"
#include "models/weight_loader.h"

namespace df::models {
namespace {

TensorTarget layer_target(HyV3Model::Layer& l, TensorKind kind) {
  switch (kind) {
    case TensorKind::ffn_gate:
      return {.weight = &l.ffn_gate};
    case TensorKind::ffn_up:
      return {.weight = &l.ffn_up};
    case TensorKind::ffn_down:
      return {.weight = &l.ffn_down};
    case TensorKind::selection_bias:
      return {.f32 = &l.selection_bias};
    case TensorKind::shared_gate:
      return {.weight = &l.shared_gate};
    case TensorKind::shared_up:
      return {.weight = &l.shared_up};
    case TensorKind::shared_down:
      return {.weight = &l.shared_down};
    default:
      return qk_norm_layer_target(l, kind);  // experts (an empty target): the layout
  }
}

}  // namespace

HyV3Model::HyV3Model(const gguf::File& file, const LoadOptions& options)
    : MoeModelBase(options), cfg_(hy_v3_config(file)) {
  state_dims_ = state_dims_of(cfg_, held_layers());
  WeightLoader w(file, *backend_, std::string(kHyV3Arch));
  TensorBinder bind(w, expert_layout_, kHyV3Arch);

  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  expert_layout_.unrun_from_layer = cfg_.n_layer;  // the trailing MTP blocks
  if (!bind_tensors(bind, hy_v3_tensors(cfg_), layers_, layer_target))
    output_ = tok_embd_;  // no output.weight: the head is token_embd
  number_moe_layers(layers_);

  // Activation scratch is sized once for the widest row any matmul quantizes.
  ActRowBytes act_row(*backend_);
  for (const Layer& l : layers_)
    for (const backend::Weight* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down,
                                     &l.router, &l.shared_gate, &l.shared_up, &l.shared_down})
      act_row.add(*m);
  finish_load(file, options, w, act_row);

  info_ = moe_model_info("hy_v3", cfg_, expert_layout_,
                         std::vector<bool>(static_cast<size_t>(cfg_.n_layer), true), cfg_.rope_theta);
}

std::unique_ptr<Model> load_hy_v3(const gguf::File& file, const LoadOptions& options) {
  return std::make_unique<HyV3Model>(file, options);
}

}  // namespace df::models

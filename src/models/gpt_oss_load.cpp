// gpt-oss weight binding (ARCHITECTURES.md 7.3): every tensor of gpt_oss_tensors() checked for presence,
// shape and type; dense ones are read into RAM, the routed experts' matrices are described to the expert
// provider, which loads them. The per-expert biases are small ({n_ff or n_embd} floats per expert) and stay
// resident with the trunk.
#include "gguf/gguf.h"
#include "models/gpt_oss.h"
#include "models/gpt_oss_tensors.h"
#include "models/model_common.h"
#include "models/tensor_binding.h"
#include "models/weight_loader.h"

namespace df::models {
namespace {

TensorTarget layer_target(GptOssModel::Layer& l, TensorKind kind) {
  switch (kind) {
    case TensorKind::attn_norm:
      return {.f32 = &l.attn_norm};
    case TensorKind::attn_q:
      return {.weight = &l.wq};
    case TensorKind::attn_q_bias:
      return {.f32 = &l.bq};
    case TensorKind::attn_k:
      return {.weight = &l.wk};
    case TensorKind::attn_k_bias:
      return {.f32 = &l.bk};
    case TensorKind::attn_v:
      return {.weight = &l.wv};
    case TensorKind::attn_v_bias:
      return {.f32 = &l.bv};
    case TensorKind::attn_output:
      return {.weight = &l.wo};
    case TensorKind::attn_output_bias:
      return {.f32 = &l.bo};
    case TensorKind::attn_sinks:
      return {.f32 = &l.sinks};
    case TensorKind::post_attn_norm:
      return {.f32 = &l.post_attn_norm};
    case TensorKind::router:
      return {.weight = &l.router};
    case TensorKind::router_bias:
      return {.f32 = &l.router_bias};
    case TensorKind::gate_exps_bias:
      return {.f32 = &l.gate_bias};
    case TensorKind::up_exps_bias:
      return {.f32 = &l.up_bias};
    case TensorKind::down_exps_bias:
      return {.f32 = &l.down_bias};
    default:
      return {};  // experts: the layout
  }
}

}  // namespace

GptOssModel::GptOssModel(const gguf::File& file, const LoadOptions& options)
    : MoeModelBase(options), cfg_(gpt_oss_config(file)) {
  state_dims_ = state_dims_of(cfg_, held_layers());
  WeightLoader w(file, *backend_, std::string(kGptOssArch));
  TensorBinder bind(w, expert_layout_, kGptOssArch);

  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  bind_tensors(bind, gpt_oss_tensors(cfg_), layers_, layer_target);  // output.weight is required: never tied

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

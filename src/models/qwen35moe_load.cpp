// qwen35moe weight binding (ARCHITECTURES.md 5.2): every tensor of qwen35moe_tensors() checked for presence,
// shape and type; dense ones (the shared experts among them) are read into the backend's memory, the routed
// experts are described to the expert provider, which loads them.
#include "gguf/gguf.h"
#include "models/model_common.h"
#include "models/qwen35moe.h"
#include "models/qwen35moe_tensors.h"
#include "models/state_size.h"
#include "models/tensor_binding.h"
#include "models/weight_loader.h"

namespace df::models {
namespace {

TensorTarget layer_target(Qwen35MoeModel::Layer& l, TensorKind kind) {
  switch (kind) {
    case TensorKind::attn_q:
      return {.weight = &l.wq, .second = &l.wq_gate};  // each head's query rows, then its gate's
    case TensorKind::dn_qkv:
      return {.weight = &l.qkv};
    case TensorKind::dn_gate:
      return {.weight = &l.z};
    case TensorKind::conv:
      return {.f32 = &l.conv};
    case TensorKind::dn_dt_bias:
      return {.f32 = &l.dt_bias};
    case TensorKind::dn_a:
      return {.f32 = &l.ssm_a};
    case TensorKind::dn_beta:
      return {.weight = &l.ssm_beta};
    case TensorKind::dn_alpha:
      return {.weight = &l.ssm_alpha};
    case TensorKind::dn_norm:
      return {.f32 = &l.ssm_norm};
    case TensorKind::dn_out:
      return {.weight = &l.ssm_out};
    case TensorKind::shared_gate_inp:
      return {.weight = &l.shared_gate_inp};
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

Qwen35MoeModel::Qwen35MoeModel(const gguf::File& file, const LoadOptions& options)
    : MoeModelBase(options), cfg_(qwen35moe_config(file)) {
  state_dims_ = state_dims_of(cfg_, held_layers());
  WeightLoader w(file, *backend_, std::string(kQwen35MoeArch));
  TensorBinder bind(w, expert_layout_, kQwen35MoeArch);

  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  expert_layout_.unrun_from_layer = cfg_.n_layer;  // the trailing MTP blocks
  if (!bind_tensors(bind, qwen35moe_tensors(cfg_), layers_, layer_target))
    output_ = tok_embd_;  // no output.weight: the head is token_embd
  number_moe_layers(layers_);

  // Activation scratch is sized once for the widest row any matmul quantizes.
  ActRowBytes act_row(*backend_);
  for (const Layer& l : layers_)
    for (const backend::Weight* m :
         {&l.wq, &l.wq_gate, &l.wk, &l.wv, &l.wo, &l.qkv, &l.z, &l.ssm_beta, &l.ssm_alpha, &l.ssm_out,
          &l.router, &l.shared_gate, &l.shared_up, &l.shared_down, &l.shared_gate_inp})
      act_row.add(*m);
  finish_load(file, options, w, act_row);

  std::vector<bool> attn(static_cast<size_t>(cfg_.n_layer));
  for (size_t il = 0; il < attn.size(); ++il) attn[il] = !cfg_.recurrent[il];
  info_ = moe_model_info("qwen35moe", cfg_, expert_layout_, std::move(attn), cfg_.rope_theta);
}

std::unique_ptr<Model> load_qwen35moe(const gguf::File& file, const LoadOptions& options) {
  return std::make_unique<Qwen35MoeModel>(file, options);
}

}  // namespace df::models

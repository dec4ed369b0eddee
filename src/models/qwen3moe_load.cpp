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

Qwen3MoeModel::Qwen3MoeModel(const gguf::File& file, const LoadOptions& options)
    : MoeModelBase(options), cfg_(qwen3moe_config(file)) {
  state_dims_ = state_dims_of(cfg_, held_layers());
  WeightLoader w(file, *backend_, std::string(kQwen3MoeArch));
  TensorBinder bind(w, expert_layout_, kQwen3MoeArch);

  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  if (!bind_tensors(bind, qwen3moe_tensors(cfg_), layers_, qk_norm_layer_target<Layer>))
    output_ = tok_embd_;  // no output.weight: the head is token_embd

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

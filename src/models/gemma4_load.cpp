// gemma4 weight binding (ARCHITECTURES.md 4.2): every tensor of gemma4_tensors() checked for presence, shape
// and type; dense ones are read into the backend's memory, the routed experts are described to the expert
// provider, which loads them. The scalars the host needs (layer output scales, per-expert scales for the
// host-grouped expert path) are read back once here.
#include <cmath>

#include "gguf/gguf.h"
#include "models/gemma4.h"
#include "models/gemma4_tensors.h"
#include "models/model_common.h"
#include "models/tensor_binding.h"
#include "models/weight_loader.h"

namespace df::models {
namespace {

TensorTarget layer_target(Gemma4Model::Layer& l, TensorKind kind) {
  switch (kind) {
    case TensorKind::post_attn_norm:
      return {.f32 = &l.post_attn_norm};
    case TensorKind::layer_out_scale:
      return {.f32 = &l.out_scale_buf};
    case TensorKind::ffn_gate:
      return {.weight = &l.ffn_gate};
    case TensorKind::ffn_up:
      return {.weight = &l.ffn_up};
    case TensorKind::ffn_down:
      return {.weight = &l.ffn_down};
    case TensorKind::ffn_post_norm:
      return {.f32 = &l.ffn_post_norm};
    case TensorKind::ffn_post_norm_1:
      return {.f32 = &l.post_norm_1};
    case TensorKind::ffn_pre_norm_2:
      return {.f32 = &l.pre_norm_2};
    case TensorKind::ffn_post_norm_2:
      return {.f32 = &l.post_norm_2};
    case TensorKind::router_scale:
      return {.f32 = &l.router_scale};
    case TensorKind::down_exps_scale:
      return {.f32 = &l.down_scale};
    default:
      return qk_norm_layer_target(l,
                                  kind);  // attention, norms, router; experts (an empty target): the layout
  }
}

}  // namespace

Gemma4Model::Gemma4Model(const gguf::File& file, const LoadOptions& options)
    : MoeModelBase(options), cfg_(gemma4_config(file)) {
  state_dims_ = state_dims_of(cfg_, held_layers());
  WeightLoader w(file, *backend_, std::string(kGemma4Arch));
  TensorBinder bind(w, expert_layout_, kGemma4Arch);

  // rope_freqs is the one tensor outside the layers that the base does not bind.
  std::vector<TensorDesc> described = gemma4_tensors(cfg_), layered;
  for (const TensorDesc& t : described) {
    if (t.kind == TensorKind::rope_freqs)
      bind.bind(t, {.f32 = &rope_freqs_});
    else
      layered.push_back(t);
  }
  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  if (!bind_tensors(bind, layered, layers_, layer_target)) output_ = tok_embd_;  // tied head
  number_moe_layers(layers_);
  for (Layer& l : layers_) {
    if (l.out_scale_buf) backend_->download(&l.out_scale, l.out_scale_buf, 1);
    if (l.down_scale) {
      l.down_scale_host.resize(static_cast<size_t>(cfg_.n_expert));
      backend_->download(l.down_scale_host.data(), l.down_scale, l.down_scale_host.size());
    }
  }

  // Activation scratch is sized once for the widest row any matmul quantizes.
  ActRowBytes act_row(*backend_);
  for (const Layer& l : layers_)
    for (const backend::Weight* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.router})
      act_row.add(*m);
  finish_load(file, options, w, act_row);

  // ModelInfo's head fields: the widest layer's (the per-layer ones are in config()).
  struct {
    std::string name;
    int n_vocab, n_ctx_train, n_layer, n_embd, n_head, n_head_kv, head_dim, n_expert, n_expert_used;
    float eps;
  } sizes{cfg_.name,
          cfg_.n_vocab,
          cfg_.n_ctx_train,
          cfg_.n_layer,
          cfg_.n_embd,
          cfg_.n_head,
          static_cast<int>(cfg_.max_kv_dim() / cfg_.max_head_dim()),
          cfg_.max_head_dim(),
          cfg_.n_expert,
          cfg_.n_expert_used,
          cfg_.eps};
  info_ = moe_model_info("gemma4", sizes, expert_layout_,
                         std::vector<bool>(static_cast<size_t>(cfg_.n_layer), true), cfg_.rope_theta);
  embd_scale_ = std::sqrt(static_cast<float>(cfg_.n_embd));  // ggml_scale(inpL, sqrtf(n_embd))
  logit_softcap_ = cfg_.final_logit_softcap;
}

std::unique_ptr<Model> load_gemma4(const gguf::File& file, const LoadOptions& options) {
  return std::make_unique<Gemma4Model>(file, options);
}

}  // namespace df::models

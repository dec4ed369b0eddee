#pragma once
// Binds an architecture's described tensors (tensor_desc.h) through a WeightLoader, by role: tables and
// matrices into backend::Weights, F32 vectors into the backend's memory, expert stacks into the ExpertLayout
// that the expert provider loads from. Each loader only says where each kind goes; checks and messages are
// WeightLoader's.
#include <string_view>

#include "backend/backend.h"
#include "models/expert_provider.h"
#include "models/tensor_desc.h"

namespace df::models {

class WeightLoader;

// Where a described tensor goes: `weight` for the table, matmul and router roles, `f32` for vectors; none
// for experts, which go to the layout.
struct TensorTarget {
  backend::Weight* weight = nullptr;
  backend::Buf<const float>* f32 = nullptr;
  backend::Weight* second = nullptr;  // a matrix of row groups (TensorDesc::row_group): the odd groups
};

class TensorBinder {
 public:
  TensorBinder(WeightLoader& w, ExpertLayout& experts, std::string_view arch)
      : w_(w), experts_(experts), arch_(arch) {}

  // Checks and loads `t` into `target` (an expert tensor into the layout entry of its layer, appended when it
  // is that layer's first). An absent optional tensor is skipped: false.
  bool bind(const TensorDesc& t, TensorTarget target);
  // Whether the file holds `t` (under its name or its alias).
  bool present(const TensorDesc& t) const;

 private:
  ExpertLayerLayout& expert_layer(int il);

  WeightLoader& w_;
  ExpertLayout& experts_;
  std::string_view arch_;
};

// The targets of the kinds a QK-norm GQA layer with a router names alike (lfm2moe's attention layers,
// qwen3moe): attention and FFN norms, Q/K/V/output, the QK norms and the router, for a Layer with those
// members; an empty target for any other kind.
template <class Layer>
TensorTarget qk_norm_layer_target(Layer& l, TensorKind kind) {
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
      return {};
  }
}

}  // namespace df::models

#pragma once
// Binds an architecture's described tensors (tensor_desc.h) through a WeightLoader, by role: tables and
// matrices into backend::Weights, F32 vectors into RAM, expert stacks into the ExpertLayout that the expert
// provider loads from. Each loader only says where each kind goes; checks and messages are WeightLoader's.
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
  const float** f32 = nullptr;
};

class TensorBinder {
 public:
  TensorBinder(WeightLoader& w, ExpertLayout& experts, std::string_view arch)
      : w_(w), experts_(experts), arch_(arch) {}

  // Checks and loads `t` into `target` (an expert tensor into the layout entry of its layer, appended when it
  // is that layer's first). An absent optional tensor is skipped: false.
  bool bind(const TensorDesc& t, TensorTarget target);

 private:
  ExpertLayerLayout& expert_layer(int il);

  WeightLoader& w_;
  ExpertLayout& experts_;
  std::string_view arch_;
};

}  // namespace df::models

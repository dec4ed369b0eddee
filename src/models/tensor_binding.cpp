#include "models/tensor_binding.h"

#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {
namespace {

[[noreturn]] void no_place(std::string_view arch, const TensorDesc& t) {
  fail("internal: {}: tensor '{}' has no place of its role in the loader", arch, t.name);
}

}  // namespace

ExpertLayerLayout& TensorBinder::expert_layer(int il) {
  if (experts_.layers.empty() || experts_.layers.back().model_layer != il) {
    ExpertLayerLayout& el = experts_.layers.emplace_back();
    el.model_layer = il;
  }
  return experts_.layers.back();
}

bool TensorBinder::bind(const TensorDesc& t, TensorTarget target) {
  if (t.optional && !w_.has(t.name)) return false;
  const std::string name = t.alias.empty() ? t.name : w_.first_present({t.name, t.alias});
  const auto& ne = t.ne;
  switch (t.role) {
    case TensorRole::table:
    case TensorRole::matmul:
    case TensorRole::router:
      if (!target.weight || ne.size() != 2) no_place(arch_, t);
      *target.weight =
          t.role == TensorRole::table ? w_.table(name, ne[0], ne[1]) : w_.matrix(name, ne[0], ne[1]);
      return true;
    case TensorRole::vector:
      if (!target.f32 || ne.empty() || ne.size() > 2) no_place(arch_, t);
      // WeightLoader takes the shape as an initializer list.
      *target.f32 = ne.size() == 1 ? w_.f32(name, {ne[0]}) : w_.f32(name, {ne[0], ne[1]});
      return true;
    case TensorRole::expert:
      break;
  }
  if (ne.size() != 3) no_place(arch_, t);
  const GgmlType type = w_.matmul_type(name, {ne[0], ne[1], ne[2]});
  ExpertLayerLayout& el = expert_layer(t.layer);
  const bool down = t.kind == TensorKind::down_exps;
  el.n_embd = down ? ne[1] : ne[0];
  el.n_ff = down ? ne[0] : ne[1];
  el.n_expert = static_cast<int>(ne[2]);
  switch (t.kind) {
    case TensorKind::gate_exps:
      el.gate_name = name, el.gate_type = type;
      break;
    case TensorKind::up_exps:
      el.up_name = name, el.up_type = type;
      break;
    case TensorKind::down_exps:
      el.down_name = name, el.down_type = type;
      break;
    default:
      no_place(arch_, t);
  }
  return true;
}

}  // namespace df::models

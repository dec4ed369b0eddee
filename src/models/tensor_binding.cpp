#include "models/tensor_binding.h"

#include <tuple>

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

bool TensorBinder::present(const TensorDesc& t) const {
  return w_.has(t.name) || (!t.alias.empty() && w_.has(t.alias));
}

bool TensorBinder::bind(const TensorDesc& t, TensorTarget target) {
  if (t.optional && !w_.has(t.name)) return false;
  if (!t.replaced_by.empty() && w_.has(t.replaced_by)) {
    // llama.cpp loads the replacement alone and refuses a file with tensors it did not load.
    if (w_.has(t.name))
      fail("{}: {}: the file has '{}' and also '{}', which stands in for it: a file holds one or the other",
           w_.path(), arch_, t.name, t.replaced_by);
    return false;
  }
  const std::string name = t.alias.empty() ? t.name : w_.first_present({t.name, t.alias});
  const auto& ne = t.ne;
  switch (t.role) {
    case TensorRole::table:
    case TensorRole::matmul:
    case TensorRole::router:
      if (t.row_group > 0) {
        if (!target.weight || !target.second || ne.size() != 2) no_place(arch_, t);
        std::tie(*target.weight, *target.second) = w_.matrix_halves(name, ne[0], ne[1], t.row_group);
        return true;
      }
      // A 1-D matrix is one output row (qwen35moe's shared-expert gate).
      if (ne.size() == 1 && target.weight && t.role != TensorRole::table) {
        *target.weight = w_.matrix(name, ne[0], 1);
        return true;
      }
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
  el.n_embd = t.kind == TensorKind::down_exps ? ne[1] : ne[0];
  el.n_expert = static_cast<int>(ne[2]);
  switch (t.kind) {
    case TensorKind::gate_exps:
      el.n_ff = ne[1];
      el.gate_name = name, el.gate_type = type, el.gate_row0 = 0;
      break;
    case TensorKind::up_exps:
      el.n_ff = ne[1];
      el.up_name = name, el.up_type = type, el.up_row0 = 0;
      break;
    case TensorKind::gate_up_exps:
      // Each expert's 2·n_ff rows: gate first, then up (llama.cpp's build_moe_ffn splits them so).
      el.n_ff = ne[1] / 2;
      el.gate_name = name, el.gate_type = type, el.gate_row0 = 0;
      el.up_name = name, el.up_type = type, el.up_row0 = el.n_ff;
      break;
    case TensorKind::down_exps:
      el.n_ff = ne[0];
      el.down_name = name, el.down_type = type;
      break;
    default:
      no_place(arch_, t);
  }
  return true;
}

}  // namespace df::models

#include "models/tensor_desc.h"

#include <fmt/format.h>

namespace df::models {

bool routes_experts(TensorKind kind) {
  switch (kind) {
    case TensorKind::ffn_norm:        // lfm2moe, qwen3moe, hy_v3, qwen35moe
    case TensorKind::post_attn_norm:  // gpt-oss's norm before the FFN
    case TensorKind::router:
    case TensorKind::router_bias:
    case TensorKind::router_scale:
    case TensorKind::selection_bias:
      return true;
    default:
      return false;
  }
}

TensorDesc& add_tensor(std::vector<TensorDesc>& out, TensorKind kind, TensorRole role, std::string name,
                       std::vector<int64_t> ne) {
  TensorDesc& t = out.emplace_back();
  t.kind = kind;
  t.role = role;
  t.name = std::move(name);
  t.ne = std::move(ne);
  return t;
}

TensorDesc& add_layer_tensor(std::vector<TensorDesc>& out, int il, TensorKind kind, TensorRole role,
                             const char* suffix, std::vector<int64_t> ne) {
  TensorDesc& t = add_tensor(out, kind, role, fmt::format("blk.{}.{}", il, suffix), std::move(ne));
  t.layer = il;
  return t;
}

void add_gate_up_exps(std::vector<TensorDesc>& out, int il, int64_t n_embd, int64_t n_ff, int64_t n_expert) {
  using K = TensorKind;
  using R = TensorRole;
  TensorDesc& fused = add_layer_tensor(out, il, K::gate_up_exps, R::expert, "ffn_gate_up_exps.weight",
                                       {n_embd, 2 * n_ff, n_expert});
  fused.optional = true;
  const std::string fused_name = fused.name;  // `fused` moves when the vector grows
  add_layer_tensor(out, il, K::gate_exps, R::expert, "ffn_gate_exps.weight", {n_embd, n_ff, n_expert})
      .replaced_by = fused_name;
  add_layer_tensor(out, il, K::up_exps, R::expert, "ffn_up_exps.weight", {n_embd, n_ff, n_expert})
      .replaced_by = fused_name;
}

}  // namespace df::models

#pragma once
// Tensor names of llama.cpp's GGUF convention that more than one layer needs to recognise.
#include <optional>
#include <string_view>

namespace df::gguf {

// A routed-expert weight: "blk.<N>.ffn_<gate|up|down|gate_up>_exps.weight", {in, out, n_expert}. These are
// the tensors the expert store streams; everything else (shared experts, per-expert biases, routers) is
// resident.
enum class ExpertTensorKind { Gate, Up, Down, GateUp };
struct ExpertTensorName {
  int layer = 0;
  ExpertTensorKind kind = ExpertTensorKind::Gate;
};
std::optional<ExpertTensorName> parse_expert_tensor_name(std::string_view name);
inline bool is_routed_expert_weight(std::string_view name) {
  return parse_expert_tensor_name(name).has_value();
}

}  // namespace df::gguf

#include "gguf/tensor_names.h"

#include <charconv>

namespace df::gguf {

std::optional<ExpertTensorName> parse_expert_tensor_name(std::string_view name) {
  constexpr std::string_view prefix = "blk.", suffix = "_exps.weight";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  name.remove_suffix(suffix.size());
  int layer = 0;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
  if (ec != std::errc() || p == name.data() || layer < 0) return std::nullopt;
  const std::string_view rest(p, static_cast<size_t>(name.data() + name.size() - p));
  if (rest == ".ffn_gate") return ExpertTensorName{layer, ExpertTensorKind::Gate};
  if (rest == ".ffn_up") return ExpertTensorName{layer, ExpertTensorKind::Up};
  if (rest == ".ffn_down") return ExpertTensorName{layer, ExpertTensorKind::Down};
  if (rest == ".ffn_gate_up") return ExpertTensorName{layer, ExpertTensorKind::GateUp};
  return std::nullopt;
}

}  // namespace df::gguf

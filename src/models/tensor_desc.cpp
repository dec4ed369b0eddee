#include "models/tensor_desc.h"

#include <fmt/format.h>

namespace df::models {

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

}  // namespace df::models

#pragma once
// Which tensors of a GGUF become expert records and where each record's parts come from. Routed-expert
// weights are found by name: blk.N.ffn_{gate,up,down}_exps.weight, or the fused blk.N.ffn_gate_up_exps.weight
// {H, 2F, E} (gate rows 0..F-1, up rows F..2F-1 of each expert's slab). Everything else, per-expert biases
// included, is dense.
#include <vector>

#include "gguf/gguf.h"
#include "store/store.h"

namespace df::store {

// One source tensor of a MoE layer and the record parts cut from each expert's slab of it.
struct SourceSlabs {
  const gguf::TensorInfo* tensor = nullptr;
  uint64_t slab_bytes = 0;  // one expert's rows
  uint64_t row_bytes = 0;
  std::vector<const ExpertPart*> parts;  // point into StorePlan::layout
};

struct StorePlan {
  StorePlan() = default;
  StorePlan(StorePlan&&) = default;  // moving keeps the parts where SourceSlabs points
  StorePlan(const StorePlan&) = delete;
  Layout layout;
  std::vector<std::vector<SourceSlabs>> sources;  // per MoE layer, in source file order
  std::vector<const gguf::TensorInfo*> dense;     // in the source's tensor order
};

// Throws df::Error naming the tensor when shapes disagree (gate/up {H, F, E}, down {F, H, E}, the same E in
// every layer), a part is missing, or the file has no routed experts at all. The plan points into `src`.
StorePlan plan_store(const gguf::File& src);

}  // namespace df::store

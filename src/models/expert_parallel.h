#pragma once
// Expert parallel (--split-mode expert): the trunk on one device, each MoE layer's experts spread over every
// device in contiguous ranges (one part each, as llama.cpp's --tensor-split sizes a layer split). For a
// batch, the model reads the routing back, sends each part the rows of the tokens routed to its experts,
// runs the part's FFNs on the part's device and gathers every result on its own device, where the weighted
// sum is formed in the fixed slot order (moe_block.cpp, add_experts): the output is the bits of one device
// of the same kind.
#include <memory>
#include <span>
#include <vector>

#include "models/expert_provider.h"

namespace df::models {

// Every expert of the file resident, part i's range of each layer in part i's backend (its memory); the
// ranges come from split_items(n_expert, shares, "expert") (layer_split.h).
class ExpertParallelProvider final : public ExpertProvider {
 public:
  // model_backend: where the model computes (the tables part_copy() mirrors live there); parts: each
  // backend with its range of experts, in expert order, covering every expert of every layer.
  ExpertParallelProvider(const gguf::File& file, const ExpertLayout& layout, backend::Backend& model_backend,
                         std::vector<experts::ExpertPart> parts);

  void prefetch(int, std::span<const int32_t>) override {}
  bool uses_prefetch() const override { return false; }
  size_t max_held(int moe_layer) const override;
  std::span<const experts::ExpertPart> parts(int moe_layer) const override;
  backend::Buf<const float> part_copy(size_t part, backend::Buf<const float> of_model) override;
  ExpertView acquire(int moe_layer, int expert) override;
  void release(int, int) override {}

 private:
  size_t part_of(int moe_layer, int expert) const;

  backend::Backend& model_backend_;
  std::vector<experts::ExpertPart> parts_;
  std::vector<std::unique_ptr<ResidentExpertProvider>> resident_;  // one per part
  size_t n_moe_layers_ = 0;
  int n_expert_ = 0;
  // Tables of the model's backend copied into a part's memory: (part, source view, the copy).
  struct PartCopy {
    size_t part = 0;
    backend::Buf<const float> source;
    backend::DeviceBuffer copy;
  };
  std::vector<PartCopy> copies_;
  std::vector<float> staging_;  // a table on its way through the host (first use only)
};

}  // namespace df::models

#pragma once
// Every routed expert of a GGUF read into RAM at construction (--resident, and the models' default provider),
// each matrix repacked as the store would hold it.
#include <cstddef>
#include <vector>

#include "experts/expert_provider.h"
#include "util/huge_page_buffer.h"

namespace df::gguf {
class File;
}

namespace df::models {

using experts::ExpertLayerLayout;
using experts::ExpertLayout;
using experts::ExpertProvider;
using experts::ExpertView;

// Every expert read from the GGUF into RAM at construction, each matrix repacked as the store would hold it.
class ResidentExpertProvider final : public ExpertProvider {
 public:
  // Each matrix in the layout `backend` reads fastest (Backend::preferred_packing).
  ResidentExpertProvider(const gguf::File& file, const ExpertLayout& layout, const backend::Backend& backend);

  void prefetch(int, std::span<const int32_t>) override {}
  ExpertView acquire(int moe_layer, int expert) override;
  void release(int, int) override {}
  size_t bytes() const;

 private:
  struct Layer {
    ExpertLayerLayout layout;
    HugePageBuffer gate, up, down;
    quant::RowPacking gate_packing = quant::RowPacking::kNone, up_packing = quant::RowPacking::kNone,
                      down_packing = quant::RowPacking::kNone;
  };
  std::vector<Layer> layers_;
};

}  // namespace df::models

#pragma once
// Every routed expert of a GGUF uploaded to the backend at construction (--resident, and the models' default
// provider), each matrix in the layout the backend reads fastest.
#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "experts/expert_provider.h"

namespace df::gguf {
class File;
}

namespace df::models {

using experts::ExpertLayerLayout;
using experts::ExpertLayout;
using experts::ExpertProvider;
using experts::ExpertView;

// Every expert read from the GGUF into the backend's memory at construction (Backend::upload_weights: RAM
// for the CPU, VRAM for a GPU), each matrix in the layout the backend reads fastest.
class ResidentExpertProvider final : public ExpertProvider {
 public:
  // Holds the MoE layers of model layers [first_layer, end_layer) (a stage of a layer split; end_layer -1:
  // to the last); acquiring another layer's expert is a df::Error.
  ResidentExpertProvider(const gguf::File& file, const ExpertLayout& layout, backend::Backend& backend,
                         int first_layer = 0, int end_layer = -1);
  // Holds experts [first_expert, end_expert) of every MoE layer (a part of an expert-parallel spread:
  // models/expert_parallel.h); acquiring another expert is a df::Error, and there are no resident stacks
  // (the routed op indexes a whole layer's experts).
  struct ExpertRange {
    int first_expert = 0, end_expert = 0;
  };
  ResidentExpertProvider(const gguf::File& file, const ExpertLayout& layout, backend::Backend& backend,
                         ExpertRange experts);

  void prefetch(int, std::span<const int32_t>) override {}
  bool uses_prefetch() const override { return false; }
  std::optional<backend::RoutedExperts> resident_stacks(int moe_layer) const override;
  size_t max_held(int moe_layer) const override {
    return static_cast<size_t>(layers_[static_cast<size_t>(moe_layer)].layout.n_expert);
  }
  ExpertView acquire(int moe_layer, int expert) override;
  void release(int, int) override {}
  size_t bytes() const;

 private:
  struct Layer {
    ExpertLayerLayout layout;
    bool held = false;                        // in this provider's range of layers
    backend::UploadedWeights gate, up, down;  // every expert's matrix of each kind
  };
  void load(const gguf::File& file, const ExpertLayout& layout, backend::Backend& backend, int first_layer,
            int end_layer);
  const Layer& held_layer(int moe_layer) const;
  std::vector<Layer> layers_;
  // The experts held of each layer: all (first_expert_ 0, end_expert_ -1) or a part's range.
  int first_expert_ = 0, end_expert_ = -1;
};

}  // namespace df::models

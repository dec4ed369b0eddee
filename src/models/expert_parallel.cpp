#include "models/expert_parallel.h"

#include "util/error.h"

namespace df::models {

ExpertParallelProvider::ExpertParallelProvider(const gguf::File& file, const ExpertLayout& layout,
                                               backend::Backend& model_backend,
                                               std::vector<experts::ExpertPart> parts)
    : model_backend_(model_backend), parts_(std::move(parts)), n_moe_layers_(layout.layers.size()) {
  if (parts_.empty()) fail("expert split: no part to hold the experts");
  if (layout.layers.empty()) fail("expert split: the model has no MoE layer to spread");
  n_expert_ = layout.layers.front().n_expert;
  for (const auto& l : layout.layers)
    if (l.n_expert != n_expert_)
      fail("expert split: MoE layers of {} and {} experts (the split needs the same number in each layer)",
           n_expert_, l.n_expert);
  int next = 0;
  for (size_t i = 0; i < parts_.size(); ++i) {
    const experts::ExpertPart& p = parts_[i];
    if (!p.backend) fail("expert split: part {} has no backend", i);
    if (p.first_expert != next || p.end_expert <= p.first_expert)
      fail("expert split: part {} holds experts {}-{}, where expert {} follows the part before", i,
           p.first_expert, p.end_expert - 1, next);
    next = p.end_expert;
  }
  if (next != n_expert_)
    fail("expert split: the parts hold experts 0-{} of each layer's {} (they must hold each expert once)",
         next - 1, n_expert_);
  for (const experts::ExpertPart& p : parts_)
    resident_.push_back(std::make_unique<ResidentExpertProvider>(
        file, layout, *p.backend, ResidentExpertProvider::ExpertRange{p.first_expert, p.end_expert}));
}

size_t ExpertParallelProvider::max_held(int) const { return static_cast<size_t>(n_expert_); }

std::span<const experts::ExpertPart> ExpertParallelProvider::parts(int moe_layer) const {
  if (moe_layer < 0 || static_cast<size_t>(moe_layer) >= n_moe_layers_)
    fail("expert provider: MoE layer {} out of range ({} layers)", moe_layer, n_moe_layers_);
  return parts_;
}

size_t ExpertParallelProvider::part_of(int moe_layer, int expert) const {
  for (size_t i = 0; i < parts_.size(); ++i)
    if (expert >= parts_[i].first_expert && expert < parts_[i].end_expert) return i;
  fail("expert provider: expert {} out of range (MoE layer {} has {})", expert, moe_layer, n_expert_);
}

ExpertView ExpertParallelProvider::acquire(int moe_layer, int expert) {
  return resident_[part_of(moe_layer, expert)]->acquire(moe_layer, expert);
}

backend::Buf<const float> ExpertParallelProvider::part_copy(size_t part, backend::Buf<const float> of_model) {
  if (part >= parts_.size()) fail("expert split: part {} of {}", part, parts_.size());
  if (!of_model || parts_[part].backend == &model_backend_) return of_model;
  for (const PartCopy& c : copies_)
    if (c.part == part && c.source.same_view(of_model))
      return c.copy.as<const float>().first(of_model.size());
  // First use (the model's first batch): through the host, once.
  backend::Backend& to = *parts_[part].backend;
  staging_.resize(of_model.size());
  model_backend_.download(staging_.data(), of_model, of_model.size());
  PartCopy& c = copies_.emplace_back();
  c.part = part;
  c.source = of_model;
  c.copy = to.alloc_array<float>(of_model.size(), "expert tables of an expert split");
  to.upload(c.copy.as<float>(), staging_.data(), of_model.size());
  return c.copy.as<const float>().first(of_model.size());
}

}  // namespace df::models

#include "models/layer_split.h"

#include <fmt/ranges.h>

#include <cmath>

#include "models/model_common.h"
#include "models/moe_model_base.h"
#include "util/error.h"

namespace df::models {
namespace {

// The split's experts() as one provider: each call goes to the stage that computes that MoE layer.
class StageExperts final : public ExpertProvider {
 public:
  explicit StageExperts(std::vector<ExpertProvider*> of_layer) : of_layer_(std::move(of_layer)) {
    for (ExpertProvider* p : of_layer_) uses_prefetch_ = uses_prefetch_ || p->uses_prefetch();
  }

  void prefetch(int l, std::span<const int32_t> ids) override { at(l).prefetch(l, ids); }
  bool uses_prefetch() const override { return uses_prefetch_; }
  void will_acquire(int l, std::span<const int32_t> ids) override { at(l).will_acquire(l, ids); }
  std::optional<backend::RoutedExperts> resident_stacks(int l) const override {
    return at(l).resident_stacks(l);
  }
  std::optional<backend::RoutedExperts> routed_slots(int l, std::span<const int32_t> used,
                                                     const experts::RoutedOp& op) override {
    return at(l).routed_slots(l, used, op);
  }
  void release_routed(int l, std::span<const int32_t> used) override { at(l).release_routed(l, used); }
  size_t max_held(int l) const override { return at(l).max_held(l); }
  ExpertView acquire(int l, int expert) override { return at(l).acquire(l, expert); }
  void release(int l, int expert) override { at(l).release(l, expert); }
  void release_spare() override {
    for (ExpertProvider* p : of_layer_) p->release_spare();
  }

 private:
  ExpertProvider& at(int moe_layer) const {
    if (moe_layer < 0 || moe_layer >= static_cast<int>(of_layer_.size()))
      fail("expert provider: MoE layer {} out of range ({} layers)", moe_layer, of_layer_.size());
    return *of_layer_[static_cast<size_t>(moe_layer)];
  }
  std::vector<ExpertProvider*> of_layer_;
  bool uses_prefetch_ = false;
};

class LayerSplitModel;

// One sequence's state: a state of each stage (its layers' KV and recurrent state on its device).
class LayerSplitState final : public ModelState {
 public:
  LayerSplitState(const LayerSplitModel& owner, std::vector<std::unique_ptr<ModelState>> parts, int n_ctx)
      : owner_(&owner), parts_(std::move(parts)), n_ctx_(n_ctx) {}

  int n_ctx() const override { return n_ctx_; }
  void reset() override {
    n_past = 0;
    for (auto& p : parts_) p->reset();
  }
  size_t bytes() const override {
    size_t total = 0;
    for (const auto& p : parts_) total += p->bytes();
    return total;
  }
  void copy_sequence_from(const ModelState& other) override {
    const auto* o = dynamic_cast<const LayerSplitState*>(&other);
    if (!o || o->owner_ != owner_)
      fail("layer split: copy_sequence_from() was given a state of another model");
    if (o->n_ctx_ != n_ctx_)
      fail("layer split: copy_sequence_from() between contexts of {} and {} positions", o->n_ctx_, n_ctx_);
    for (size_t i = 0; i < parts_.size(); ++i) parts_[i]->copy_sequence_from(*o->parts_[i]);
    n_past = o->n_past;
  }

  const LayerSplitModel* owner() const { return owner_; }
  ModelState& part(size_t stage) { return *parts_[stage]; }

 private:
  const LayerSplitModel* owner_;
  std::vector<std::unique_ptr<ModelState>> parts_;
  int n_ctx_;
};

class LayerSplitModel final : public Model {
 public:
  LayerSplitModel(std::vector<std::unique_ptr<Model>> models, std::vector<MoeModelBase*> stages)
      : models_(std::move(models)), stages_(std::move(stages)) {
    std::vector<ExpertProvider*> of_layer;
    const ModelInfo& in = info();
    for (size_t moe = 0; moe < in.moe_layers.size(); ++moe)
      for (MoeModelBase* s : stages_)
        if (s->runs_layer(in.moe_layers[moe])) of_layer.push_back(&s->experts());
    experts_ = std::make_unique<StageExperts>(std::move(of_layer));
    for (MoeModelBase* s : stages_) s->set_read_ahead_experts(experts_.get());
    stage_steps_.resize(stages_.size());
  }

  const ModelInfo& info() const override { return stages_.back()->info(); }
  std::unique_ptr<ModelState> new_state(int n_ctx) override {
    std::vector<std::unique_ptr<ModelState>> parts;
    for (MoeModelBase* s : stages_) parts.push_back(s->new_state(n_ctx));
    return std::make_unique<LayerSplitState>(*this, std::move(parts), n_ctx);
  }
  // Each stage's own figure, which counts the KV and recurrent state of every layer: an upper bound.
  uint64_t state_bytes(int n_ctx, int n_batch) const override {
    uint64_t total = 0;
    for (const MoeModelBase* s : stages_) total += s->state_bytes(n_ctx, n_batch);
    return total;
  }
  void forward(ModelState& state, std::span<const int32_t> tokens, std::span<float> logits, bool all_rows,
               ForwardCapture* capture) override {
    const SequenceStep one{&state, tokens, logits, all_rows};
    run(std::span(&one, 1), capture);
  }
  void forward_many(std::span<const SequenceStep> steps) override { run(steps, nullptr); }
  ExpertProvider& experts() override { return *experts_; }
  void set_routing_sink(RoutingSink* sink) override {
    for (MoeModelBase* s : stages_) s->set_routing_sink(sink);
  }

 private:
  LayerSplitState& own(ModelState* state) const {
    auto* st = dynamic_cast<LayerSplitState*>(state);
    if (!st || st->owner() != this)
      fail("{}: forward() was given a state made by another model", info().arch);
    return *st;
  }

  // Every stage in turn over the same steps, each with its own part of every state; the hand-over buffer
  // carries x between them. The checks of MoeModelBase::forward() come first, on the split's own states,
  // so that nothing is touched when one fails.
  void run(std::span<const SequenceStep> steps, ForwardCapture* capture) {
    const ModelInfo& in = info();
    if (steps.empty()) fail("{}: forward_many() needs at least one sequence", in.arch);
    int64_t T = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      own(steps[i].state);
      check_forward_args(in.arch, *steps[i].state, steps[i].tokens, steps[i].logits, steps[i].all_rows,
                         in.n_vocab);
      for (size_t j = 0; j < i; ++j)
        if (steps[j].state == steps[i].state)
          fail("{}: forward_many() was given the same state for sequences {} and {}", in.arch, j, i);
      T += static_cast<int64_t>(steps[i].tokens.size());
    }
    hidden_.resize(static_cast<size_t>(T) * static_cast<size_t>(in.n_embd));  // grows only
    for (size_t k = 0; k < stages_.size(); ++k) {
      std::vector<SequenceStep>& mine = stage_steps_[k];
      mine.assign(steps.begin(), steps.end());
      for (SequenceStep& s : mine) s.state = &own(s.state).part(k);
      // The stage before guessed this stage's first MoE layers; what its tier queued behind the next acquire
      // goes now, before this stage's first layer computes (the stage before has let go of its pins).
      if (k > 0) stages_[k]->experts().start_prefetches();
      stages_[k]->forward_stage(mine, hidden_, capture);
      // The RAM tier under the stages' own tiers is one: what this stage kept pinned there goes first.
      stages_[k]->experts().release_spare();
    }
    for (const SequenceStep& s : steps) s.state->n_past += static_cast<int>(s.tokens.size());
  }

  std::vector<std::unique_ptr<Model>> models_;
  std::vector<MoeModelBase*> stages_;  // models_, as the stages they are
  std::unique_ptr<StageExperts> experts_;
  std::vector<float> hidden_;                           // x between stages, T × n_embd
  std::vector<std::vector<SequenceStep>> stage_steps_;  // reused: no allocation per step
};

}  // namespace

std::vector<std::pair<int, int>> split_items(int n, std::span<const double> shares, std::string_view item) {
  if (shares.empty()) fail("{} split: no device to split {} {}s over", item, n, item);
  double total = 0;
  for (double s : shares) {
    if (!std::isfinite(s) || s < 0)
      fail("{} split: a device's share {} is not a non-negative number", item, s);
    total += s;
  }
  if (!(total > 0)) fail("{} split: the devices' shares add up to 0", item);
  std::vector<std::pair<int, int>> ranges;
  double sum = 0;
  int first = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    sum += shares[i];
    const int end = i + 1 == shares.size() ? n : static_cast<int>(std::lround(n * (sum / total)));
    if (end <= first)
      fail("{} split: device {} gets no {} of {} with shares {} (each device computes at least one)", item, i,
           item, n, fmt::join(shares, ","));
    ranges.emplace_back(first, end);
    first = end;
  }
  return ranges;
}

std::vector<std::pair<int, int>> split_layers(int n_layer, std::span<const double> shares) {
  return split_items(n_layer, shares, "layer");
}

std::unique_ptr<Model> load_layer_split(const gguf::File& file, std::vector<LoadOptions> stages) {
  if (stages.empty()) fail("layer split: no stage to load");
  if (stages.size() == 1) return load_model(file, stages.front());
  std::vector<std::unique_ptr<Model>> models;
  std::vector<MoeModelBase*> bases;
  int next = 0;
  for (size_t k = 0; k < stages.size(); ++k) {
    const LoadOptions& o = stages[k];
    if (o.first_layer != next)
      fail("layer split: stage {} starts at layer {}, where layer {} follows the stage before", k,
           o.first_layer, next);
    std::unique_ptr<Model> m = load_model(file, o);
    auto* base = dynamic_cast<MoeModelBase*>(m.get());
    if (!base) fail("layer split: the {} model cannot be split over devices", m->info().arch);
    next = base->end_layer();
    const bool last = k + 1 == stages.size();
    const int n_layer = m->info().n_layer;
    if (last && next != n_layer)
      fail("layer split: the last stage ends at layer {}, before the model's {} layers end", next, n_layer);
    if (!last && next == n_layer)
      fail("layer split: stage {} reaches the model's last layer with stages after it", k);
    models.push_back(std::move(m));
    bases.push_back(base);
  }
  return std::make_unique<LayerSplitModel>(std::move(models), std::move(bases));
}

}  // namespace df::models

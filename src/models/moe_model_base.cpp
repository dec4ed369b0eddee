#include "models/moe_model_base.h"

#include <algorithm>

#include "backend/backend_factory.h"
#include "models/weight_loader.h"

namespace df::models {

MoeModelBase::MoeModelBase(const LoadOptions& options)
    : prefetch_lookahead_(std::max(0, options.prefetch_lookahead)),
      first_layer_(options.first_layer),
      backend_(options.backend ? options.backend
                               : backend::make_backend(backend::BackendOptions{"cpu", options.n_threads})),
      requested_end_layer_(options.end_layer) {}

void MoeModelBase::resolve_stage(int n_layer) {
  const int end = requested_end_layer_ < 0 ? n_layer : requested_end_layer_;
  if (first_layer_ < 0 || first_layer_ >= end || end > n_layer)
    fail("layers [{}, {}) asked of a model of {} layers: a stage of a layer split runs at least one of them",
         first_layer_, end, n_layer);
  end_layer_ = end;
}

std::vector<int> MoeModelBase::layers_guessed_past_stage(const std::vector<TensorDesc>& tensors,
                                                         int n_layer) const {
  std::vector<int> moe_after;
  for (const TensorDesc& t : tensors)
    if (t.role == TensorRole::expert && t.layer >= end_layer_ && t.layer < n_layer)
      moe_after.push_back(t.layer);
  std::ranges::sort(moe_after);
  moe_after.erase(std::unique(moe_after.begin(), moe_after.end()), moe_after.end());
  if (moe_after.size() > static_cast<size_t>(prefetch_lookahead_))
    moe_after.resize(static_cast<size_t>(prefetch_lookahead_));
  return moe_after;
}

void MoeModelBase::check_n_ctx(int n_ctx) const {
  if (n_ctx < 1) fail("{}: context size {} must be at least 1", info_.arch, n_ctx);
}

uint64_t MoeModelBase::state_bytes(int n_ctx, int n_batch) const {
  return models::state_bytes(state_dims_, n_ctx, n_batch, backend_->n_threads());
}

MoeSequenceState* MoeModelBase::own_state(ModelState& state) const {
  auto* st = dynamic_cast<MoeSequenceState*>(&state);
  return st && st->owner() == this ? st : nullptr;
}

void MoeModelBase::check_whole() const {
  if (first_layer_ != 0 || end_layer_ != info_.n_layer)
    fail(
        "{}: this model computes layers {}-{} of {} as a stage of a layer split: it runs inside the split "
        "(load_layer_split), not alone",
        info_.arch, first_layer_, end_layer_ - 1, info_.n_layer);
}

void MoeModelBase::make_batch(std::span<const SequenceStep> steps) {
  if (steps.empty()) fail("{}: forward_many() needs at least one sequence", info_.arch);
  for (size_t i = 0; i < steps.size(); ++i) {
    const SequenceStep& s = steps[i];
    if (!s.state || !own_state(*s.state))
      fail("{}: forward() was given a state made by another model", info_.arch);
    check_forward_args(info_.arch, *s.state, s.tokens, s.logits, s.all_rows, info_.n_vocab);
    for (size_t j = 0; j < i; ++j)
      if (steps[j].state == s.state)
        fail("{}: forward_many() was given the same state for sequences {} and {}", info_.arch, j, i);
  }
  batch_.segments.clear();
  batch_.T = batch_.logit_rows = 0;
  for (const SequenceStep& s : steps) {
    BatchSegment seg;
    seg.state = static_cast<MoeSequenceState*>(s.state);  // own_state() said so above
    seg.tokens = s.tokens;
    seg.logits = s.logits;
    seg.row0 = batch_.T;
    seg.rows = static_cast<int64_t>(s.tokens.size());
    seg.logit_rows = s.all_rows ? seg.rows : 1;
    seg.n_past = s.state->n_past;
    batch_.T += seg.rows;
    batch_.logit_rows += seg.logit_rows;
    batch_.segments.push_back(seg);
  }
  batch_.work = batch_.segments.front().state;
}

void MoeModelBase::forward(ModelState& state, std::span<const int32_t> tokens, std::span<float> logits,
                           bool all_rows, ForwardCapture* capture) {
  check_whole();
  const SequenceStep one{&state, tokens, logits, all_rows};
  greedy_state_ = nullptr;  // this forward may overwrite the token a greedy step left
  make_batch(std::span(&one, 1));
  run_batch(batch_, capture);
}

void MoeModelBase::forward_many(std::span<const SequenceStep> steps) {
  check_whole();
  greedy_state_ = nullptr;
  make_batch(steps);
  run_batch(batch_, nullptr);
}

void MoeModelBase::queue_greedy(ModelState& state, int32_t token, int slot) {
  check_whole();
  if (slot < 0 || slot >= backend::Backend::kReadBackSlots)
    fail("{}: greedy read-back slot {} (slots 0..{})", info_.arch, slot,
         backend::Backend::kReadBackSlots - 1);
  MoeSequenceState* own = own_state(state);
  if (!own) fail("{}: queue_greedy() was given a state made by another model", info_.arch);
  // The token given, or a placeholder that passes the checks (the step reads the id its predecessor left).
  const int32_t one[1] = {token < 0 ? 0 : token};
  if (token < 0 && greedy_state_ != own)
    fail(
        "{}: a greedy step without a token must follow a greedy step of the same state, with no other "
        "forward between them",
        info_.arch);
  // make_batch's checks want a logits span; the step writes none (allocated once, never per step).
  greedy_logits_.resize(static_cast<size_t>(info_.n_vocab));
  const SequenceStep step{&state, one, greedy_logits_, false};
  make_batch(std::span(&step, 1));
  batch_.greedy_slot = slot;
  batch_.token_on_device = token < 0;
  struct Clear {
    SequenceBatch& b;
    ~Clear() {
      b.greedy_slot = -1;
      b.token_on_device = false;
    }
  } clear{batch_};
  greedy_state_ = nullptr;  // until this step is queued
  run_batch(batch_, nullptr);
  greedy_state_ = own;
}

int32_t MoeModelBase::greedy_token(int slot) {
  int32_t id = 0;
  backend_->read_back(slot, &id, sizeof id);
  if (id < 0 || id >= info_.n_vocab)
    fail("{}: the device's greedy token {} is outside the vocabulary", info_.arch, id);
  return id;
}

void MoeModelBase::forward_stage(std::span<const SequenceStep> steps, std::span<float> hidden,
                                 ForwardCapture* capture) {
  make_batch(steps);
  stage_hidden_ = hidden;
  struct Clear {
    std::span<float>& h;
    ~Clear() { h = {}; }
  } clear{stage_hidden_};
  run_batch(batch_, capture);
}

void MoeModelBase::finish_load(const gguf::File& file, const LoadOptions& options, WeightLoader& w,
                               ActRowBytes& act_row) {
  storage_ = w.take_storage();
  act_row.add(output_);
  act_row.add(expert_layout_);
  max_act_row_bytes_ = act_row.bytes();
  state_dims_.act_row_bytes = max_act_row_bytes_;
  stage_moe_end_ = 0;
  for (const auto& l : expert_layout_.layers)
    if (l.model_layer < end_layer_) ++stage_moe_end_;
  guess_moe_end_ = stage_moe_end_ + guess_layers_;
  experts_ = make_expert_provider(file, options, expert_layout_, *backend_, first_layer_, end_layer_);
}

}  // namespace df::models

#pragma once
// What the MoE architectures' models hold alike: the backend, the dense weights around the layers and their
// storage, the routed experts' layout and provider, and the checks and trunk of new_state() and forward().
// Each architecture derives from MoeModelBase and keeps its config, layers, State, layer code and loader.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "models/expert_provider.h"
#include "models/model.h"
#include "models/model_common.h"
#include "models/moe_block.h"
#include "models/sequence_state.h"
#include "models/state_size.h"
#include "models/tensor_binding.h"
#include "util/error.h"

namespace df::models {

class MoeModelBase : public Model {
 public:
  const ModelInfo& info() const override { return info_; }
  ExpertProvider& experts() override { return *experts_; }
  void set_routing_sink(RoutingSink* sink) override { routing_sink_ = sink; }
  uint64_t state_bytes(int n_ctx, int n_batch) const override;
  // Both are one batch (SequenceBatch) through run_batch: forward() of one sequence, forward_many() of
  // several.
  void forward(ModelState& state, std::span<const int32_t> tokens, std::span<float> logits, bool all_rows,
               ForwardCapture* capture = nullptr) final;
  void forward_many(std::span<const SequenceStep> steps) final;
  bool queues_greedy() const final { return first_layer_ == 0 && end_layer_ == info_.n_layer; }
  bool greedy_runs_ahead() const final { return backend_->runs_ahead_of_host(); }
  void queue_greedy(ModelState& state, int32_t token, int slot) final;
  int32_t greedy_token(int slot) final;

  // One stage of a layer split (models/layer_split.h): forward_many() over this model's layers only
  // (LoadOptions::first_layer/end_layer), x taken from `hidden` unless the stage starts at layer 0 and left
  // in it unless the stage ends at the last layer (then the steps' logits are written). The capture's
  // routing and residuals of this stage's layers are filled in (the first stage clears it).
  void forward_stage(std::span<const SequenceStep> steps, std::span<float> hidden, ForwardCapture* capture);
  // Whether model layer il is this model's to compute (all are, unless it is a stage of a layer split).
  bool runs_layer(int il) const { return il >= first_layer_ && il < end_layer_; }
  int end_layer() const { return end_layer_; }
  // Where the read-ahead guesses of a stage go: the split's provider of every layer, so that the last MoE
  // layers of a stage guess the first ones of the next stage (with those layers' routers, which this stage
  // loads for it) as the whole model would. Unset: this model's own provider, guesses within its layers.
  void set_read_ahead_experts(ExpertProvider* split_experts) { read_ahead_experts_ = split_experts; }

 protected:
  explicit MoeModelBase(const LoadOptions& options);

  // new_state()'s check: df::Error when n_ctx < 1. Messages name the model by info_.arch, so these checks
  // run only once the loader has set info_.
  void check_n_ctx(int n_ctx) const;
  // Runs a batch whose every step has been checked; each architecture's is run_layers with its State and
  // layer function.
  virtual void run_batch(const SequenceBatch& batch, ForwardCapture* capture) = 0;
  // Grows the work state (the architecture's State) to batch.T rows and runs the trunk with run_layer for
  // every layer.
  template <class State, class Arch>
  void run_layers(const SequenceBatch& batch, ForwardCapture* capture,
                  void (Arch::*run_layer)(State&, const SequenceBatch&, int, ForwardCapture*)) {
    State& work = static_cast<State&>(*batch.work);
    work.reserve(batch.T);
    Arch& self = static_cast<Arch&>(*this);
    forward_trunk(batch, capture, [&](int il) { (self.*run_layer)(work, batch, il, capture); });
  }
  // run_trunk with this model's trunk weights and sizes.
  template <class RunLayer>
  void forward_trunk(const SequenceBatch& batch, ForwardCapture* capture, RunLayer&& run_layer);
  void matmul(MoeSequenceState& st, const backend::Weight& w, backend::Buf<const float> x, int64_t rows,
              backend::Buf<float> y) {
    backend_->matmul(w, x, rows, y, st.trunk.scratch.view());
  }
  // Binds every described tensor: the trunk's own (token_embd, output_norm, output) into this base, every
  // other to layer_target(layers[t.layer], t.kind). Returns whether output.weight was bound (false: the file
  // has no head of its own, and the caller ties it to the embedding).
  template <class Layer, class LayerTarget>
  bool bind_tensors(TensorBinder& bind, const std::vector<TensorDesc>& tensors, std::vector<Layer>& layers,
                    LayerTarget&& layer_target);
  // The loader's steps once the layers are bound: the dense weights' storage taken from w, act_row (which
  // holds the layers' matrices) widened by the head and the routed experts, and the expert provider made.
  void finish_load(const gguf::File& file, const LoadOptions& options, WeightLoader& w, ActRowBytes& act_row);
  // A MoE layer's routing with its read-ahead: route_moe(target, out) routes the batch with MoE layer
  // target's router into `out`. First MoE layer `moe` itself into m's routing buffers (its normed input into
  // xn), then the guesses for the next prefetch_lookahead_ MoE layers (into the guess buffers, seen only by
  // the expert provider). In that order the layer's own ids are on the device by the time the host reads the
  // guesses back, so a backend that must read routing back waits once a layer, not twice.
  template <class RouteMoe>
  void route_with_read_ahead(MoeBuffers& m, int moe, int64_t T, backend::Buf<float> xn,
                             RouteMoe&& route_moe) {
    route_moe(moe, RoutingOut{xn, m.router_logits.view(), m.expert_ids.view(), m.expert_weights.view()});
    guess_layers_after(m, moe, T, route_moe);
  }
  // Model layer il, a dense layer, guesses like a MoE layer when the next layer is a MoE layer: that layer
  // and the next prefetch_lookahead_ - 1 (their routers on il's state before its FFN). Otherwise nothing
  // guesses the MoE layer after dense ones (lfm2's first), and its reads start only once it has routed.
  template <class RouteMoe>
  void read_ahead_from_dense_layer(MoeBuffers& m, int il, int64_t T, RouteMoe&& route_moe) {
    for (const auto& l : expert_layout_.layers)
      if (l.model_layer == il + 1) {
        guess_layers_after(m, static_cast<int>(&l - expert_layout_.layers.data()) - 1, T, route_moe);
        return;
      }
  }
  // MoE layer moe's routing told to the routing sink and written into the capture.
  void report_moe(MoeBuffers& m, int moe, const SequenceBatch& batch, ForwardCapture* capture) {
    report_routing(*backend_, routing_sink_, moe, batch, info_.n_expert_used, m);
    capture_routing(*backend_, capture, moe, batch.T, info_.n_expert_used, m);
  }
  // Each layer's index among the MoE layers (Layer::moe_index, -1 where the layer has no routed experts),
  // from the bound layout.
  template <class Layer>
  void number_moe_layers(std::vector<Layer>& layers) const {
    for (size_t i = 0; i < expert_layout_.layers.size(); ++i)
      layers[static_cast<size_t>(expert_layout_.layers[i].model_layer)].moe_index = static_cast<int>(i);
  }
  // The layers whose state this model holds (LoadOptions::first_layer/end_layer): all, or its stage's.
  LayerRange held_layers() const { return {first_layer_, requested_end_layer_}; }
  // The model layer of MoE layer `moe`.
  int moe_model_layer(int moe) const { return expert_layout_.layers[static_cast<size_t>(moe)].model_layer; }

  ModelInfo info_;
  int prefetch_lookahead_ = 1;
  // The layers this model runs (LoadOptions::first_layer/end_layer, resolved by bind_tensors), the end of
  // their MoE layers, and the end of the MoE layers it guesses: its own and, as a stage of a layer split,
  // the next prefetch_lookahead_ ones after them, whose routing weights bind_tensors loads for the guesses.
  int first_layer_ = 0, end_layer_ = 0, stage_moe_end_ = 0, guess_moe_end_ = 0;
  std::shared_ptr<backend::Backend> backend_;   // LoadOptions::backend, or the default device's
  std::vector<backend::DeviceBuffer> storage_;  // the dense weights, in the backend's memory
  backend::Weight tok_embd_, output_;
  backend::Buf<const float> output_norm_;
  ExpertLayout expert_layout_;
  std::unique_ptr<ExpertProvider> experts_;
  RoutingSink* routing_sink_ = nullptr;  // set_routing_sink
  size_t max_act_row_bytes_ = 0;
  StateDims state_dims_;  // set from the config by each constructor; act_row_bytes by finish_load
  float embd_scale_ = 1.0f, logit_softcap_ = 0.0f;  // TrunkWeights' (gemma4 sets them)

 private:
  // `state` as a sequence state when this model made it, else null.
  MoeSequenceState* own_state(ModelState& state) const;
  // forward()'s and forward_many()'s check: df::Error for a model loaded as a stage of a layer split.
  void check_whole() const;
  // first_layer_/end_layer_ from the options for a model of n_layer layers (df::Error for a range that is
  // empty or outside them).
  void resolve_stage(int n_layer);
  // The model layers after this stage whose routing its last layers guess (its last MoE layers, or the dense
  // layer before the next stage's first MoE layer: the next prefetch_lookahead_ layers that have routed
  // experts in `tensors`); none for a whole model.
  std::vector<int> layers_guessed_past_stage(const std::vector<TensorDesc>& tensors, int n_layer) const;
  // The guesses for the prefetch_lookahead_ MoE layers after MoE layer moe (-1: from the first), into the
  // guess buffers, seen only by the expert provider (the split's, for a stage's last layers).
  template <class RouteMoe>
  void guess_layers_after(MoeBuffers& m, int moe, int64_t T, RouteMoe& route_moe) {
    prefetch_next_layers(*backend_, read_ahead_experts_ ? *read_ahead_experts_ : *experts_, m, moe,
                         read_ahead_experts_ ? guess_moe_end_ : stage_moe_end_, prefetch_lookahead_, T,
                         info_.n_expert_used, info_.n_expert, [&](int target) {
                           route_moe(target, RoutingOut{m.guess_xn.view(), m.guess_logits.view(),
                                                        m.guess_ids.view(), m.guess_weights.view()});
                         });
  }
  // The checks of forward() and forward_many() (a state of this model, check_forward_args, distinct states),
  // then batch_ refilled from the steps.
  void make_batch(std::span<const SequenceStep> steps);
  SequenceBatch batch_;
  // queue_greedy: the state whose work buffers hold the token its last greedy step left (none once another
  // forward ran), and the logits span make_batch's checks want.
  MoeSequenceState* greedy_state_ = nullptr;
  std::vector<float> greedy_logits_;
  int requested_end_layer_ = -1;  // LoadOptions::end_layer, until bind_tensors resolves it
  int guess_layers_ = 0;          // MoE layers after this stage whose routing bind_tensors loaded
  ExpertProvider* read_ahead_experts_ = nullptr;  // set_read_ahead_experts
  std::span<float> stage_hidden_;                 // forward_stage's hand-over of x
};

// The work state of an architecture whose every layer keeps a KV cache of one shape and that needs no batch
// buffers beyond the shared ones and an expert wave (qwen3moe, hy_v3). Model::config() has n_layer, n_embd,
// n_head, n_head_kv, head_dim, n_expert and n_expert_used.
template <class Model>
class UniformKvState final : public MoeSequenceState {
 public:
  // act_row_bytes: the model's widest quantized activation row (its loader knows it).
  UniformKvState(const Model& model, backend::Backend& be, int n_ctx, size_t act_row_bytes)
      : MoeSequenceState(model, be, n_ctx,
                         std::vector<LayerStateSpec>(
                             static_cast<size_t>(model.config().n_layer),
                             LayerStateSpec::kv(model.config().n_head_kv, model.config().head_dim)),
                         model.config().head_dim),
        act_row_bytes_(act_row_bytes) {}

  size_t bytes() const override { return MoeSequenceState::bytes() + wave.bytes(); }

  // Grows the batch buffers to hold T tokens (no-op when they already do).
  void reserve(int64_t T) {
    if (!batch_too_small(T)) return;
    const auto& c = model().config();
    grow_batch(
        T, BatchDims{static_cast<size_t>(c.n_embd),
                     static_cast<size_t>(c.n_head) * static_cast<size_t>(c.head_dim),
                     static_cast<size_t>(c.n_head_kv) * static_cast<size_t>(c.head_dim),
                     static_cast<size_t>(c.n_expert), static_cast<size_t>(c.n_expert_used), act_row_bytes_});
    wave.reserve(static_cast<size_t>(c.n_expert_used), static_cast<size_t>(c.n_expert));
    batch_grown(T);
  }

  const Model& model() const { return static_cast<const Model&>(*owner()); }
  ExpertWave wave;

 private:
  size_t act_row_bytes_;
};

template <class Layer, class LayerTarget>
bool MoeModelBase::bind_tensors(TensorBinder& bind, const std::vector<TensorDesc>& tensors,
                                std::vector<Layer>& layers, LayerTarget&& layer_target) {
  resolve_stage(static_cast<int>(layers.size()));
  const bool embeds = first_layer_ == 0, heads = end_layer_ == static_cast<int>(layers.size());
  bool file_has_output = false;
  for (const TensorDesc& t : tensors)
    if (t.kind == TensorKind::output) file_has_output = bind.present(t);
  const std::vector<int> guessed = layers_guessed_past_stage(tensors, static_cast<int>(layers.size()));
  guess_layers_ = static_cast<int>(guessed.size());
  bool has_output = false;
  for (const TensorDesc& t : tensors) {
    if (t.kind == TensorKind::token_embd) {
      if (embeds || (heads && !file_has_output)) bind.bind(t, {.weight = &tok_embd_});  // or the tied head
    } else if (t.kind == TensorKind::output_norm) {
      if (heads) bind.bind(t, {.f32 = &output_norm_});
    } else if (t.kind == TensorKind::output) {
      if (heads) has_output = bind.bind(t, {.weight = &output_});
    } else if (t.role == TensorRole::expert || runs_layer(t.layer) ||
               (routes_experts(t.kind) && std::ranges::find(guessed, t.layer) != guessed.end())) {
      // Every layer's experts go into the layout (the MoE layers keep their model-wide numbers); only this
      // stage's are loaded (make_expert_provider).
      bind.bind(t, layer_target(layers[static_cast<size_t>(t.layer)], t.kind));
    }
  }
  return heads ? has_output : true;  // a stage without the head has nothing to tie
}

template <class RunLayer>
void MoeModelBase::forward_trunk(const SequenceBatch& batch, ForwardCapture* capture, RunLayer&& run_layer) {
  run_trunk(*backend_,
            TrunkWeights{tok_embd_, output_norm_, info_.rms_eps, output_, embd_scale_, logit_softcap_}, batch,
            info_.n_layer, info_.n_embd, expert_layout_.layers.size(), info_.n_expert_used, info_.n_vocab,
            capture, routing_sink_ != nullptr, TrunkStage{first_layer_, end_layer_, stage_hidden_},
            std::forward<RunLayer>(run_layer));
}

}  // namespace df::models

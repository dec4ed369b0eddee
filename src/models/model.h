#pragma once
// The architecture-independent model API the engine is written against. A model is loaded from a GGUF
// (load_model dispatches on general.architecture), owns its dense weights, reaches its routed experts
// only through an ExpertProvider, and runs batches of tokens against a ModelState (KV cache and recurrent
// state of one sequence), or of several sequences at once (forward_many).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/expert_provider.h"

namespace df::gguf {
class File;
}

namespace df::models {

struct ModelInfo {
  std::string arch, name;
  int n_vocab = 0;
  int n_ctx_train = 0;
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;  // of the attention layers
  int head_dim = 0;
  int n_expert = 0;
  int n_expert_used = 0;
  std::vector<int> moe_layers;    // model layer index of each MoE layer, in order
  std::vector<bool> attn_layers;  // per model layer: has a KV cache (else a recurrent/conv state)
  float rms_eps = 0.0f;
  float rope_theta = 0.0f;
};

// The per-sequence state: KV cache on attention layers, conv state on short-conv layers. n_past is the
// number of positions already processed; only forward() and reset() change it (a recurrent state cannot
// be rolled back, so a changed prefix means reset() and re-processing).
class ModelState {
 public:
  virtual ~ModelState() = default;
  int n_past = 0;
  virtual int n_ctx() const = 0;
  virtual void reset() = 0;
  virtual size_t bytes() const = 0;  // memory held by the caches and buffers
  // Makes this state hold the sequence `other` holds: n_past, the KV of the positions below it and the
  // recurrent state (batch buffers are scratch and are not copied; nothing is allocated). A snapshot for
  // prefix reuse: a recurrent state cannot be rewound, but a copy taken at a known prefix can be restored.
  // Throws df::Error when `other` is a state of another model or of another context size.
  virtual void copy_sequence_from(const ModelState& other) = 0;
};

// What forward() can report besides logits (tests, debugging, stats).
struct ForwardCapture {
  bool want_layers = false;
  std::vector<float> l_out;         // want_layers: [n_layer][T][n_embd], the residual stream after each layer
  std::vector<int32_t> expert_ids;  // [n_moe_layer][T][k], in selection order
  std::vector<float> expert_weights;  // [n_moe_layer][T][k], the weights applied to those experts
};

// Receives each MoE layer's routing as the forward runs (--record-routing): T tokens at positions
// first_pos, first_pos + 1, ..., k ids per token in the router's order (ids[t * k + j]). Called on the
// forward's thread, once per MoE layer and batch; it must not keep the span.
class RoutingSink {
 public:
  virtual ~RoutingSink() = default;
  virtual void routed(int moe_layer, int first_pos, std::span<const int32_t> ids, int64_t T, int k) = 0;
};

struct LoadOptions {
  // The backend the model computes on (backend::make_backend for --device); empty: the default device with
  // n_threads.
  std::shared_ptr<backend::Backend> backend;
  int n_threads = 0;           // CPU threads of the default backend; <= 0: one per hardware core
  int prefetch_lookahead = 1;  // MoE layers guessed ahead with the current state; 0 turns prefetching off
  // The model layers [first_layer, end_layer) this model computes, as one stage of a layer split
  // (models/layer_split.h); end_layer -1: to the last. Only those layers' weights and states are loaded
  // (with the embeddings when the range starts at 0, the head when it ends at the last layer).
  int first_layer = 0;
  int end_layer = -1;
  // Builds the provider of the routed experts; empty: a ResidentExpertProvider (every expert in RAM).
  std::function<std::unique_ptr<ExpertProvider>(const gguf::File&, const ExpertLayout&)> make_expert_provider;
};

// One sequence's share of a multi-sequence forward (Model::forward_many): its state, its tokens (at
// positions state->n_past..), and where its logits go (the last token's, or every token's with all_rows).
struct SequenceStep {
  ModelState* state = nullptr;
  std::span<const int32_t> tokens;
  std::span<float> logits;
  bool all_rows = false;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // A fresh state for sequences of up to n_ctx positions (df::Error when n_ctx < 1).
  virtual std::unique_ptr<ModelState> new_state(int n_ctx) = 0;
  // What such a state holds (its bytes()) once it has run batches of up to n_batch tokens, computed without
  // allocating: lets a caller check a context against the memory there is first.
  virtual uint64_t state_bytes(int n_ctx, int n_batch) const = 0;
  // Runs `tokens` at positions state.n_past.. as ONE batch (a prefill chunk, or one token for decode) and
  // advances n_past. Writes the logits of the last token (n_vocab floats) or, with all_rows, of every token
  // (T * n_vocab) into `logits`, which must have exactly that size. Throws df::Error on an empty batch, a
  // token id out of range, a full context, a wrong logits size or a state of another model (the state is
  // untouched then); if it throws later (an expert read fails), the state must be reset() before reuse.
  // Not reentrant: one forward at a time per Model.
  virtual void forward(ModelState& state, std::span<const int32_t> tokens, std::span<float> logits,
                       bool all_rows, ForwardCapture* capture = nullptr) = 0;
  // Runs several sequences as ONE batch: their rows go through every dense op together and each MoE layer
  // acquires each chosen expert once for all the rows routed to it (so sequences decoded side by side share
  // their expert reads), while each sequence's attention and recurrent state see only its own rows. Each
  // sequence's logits and state come out as forward() alone would give them on a backend whose results do
  // not depend on how rows are batched (the CPU backend; tested). Every step is checked as forward() checks
  // it, and the states must be distinct, before any state is touched; if it throws later, every state of
  // the batch must be reset() before reuse. No capture: routing and residuals are a single sequence's.
  virtual void forward_many(std::span<const SequenceStep> steps) = 0;
  // Greedy decoding queued ahead of the host (Session::greedy_start). queue_greedy runs one token at
  // state.n_past as forward() does (the same checks and bits), but takes the argmax of its logits where
  // they are instead of reading them back: it keeps that id on the backend for the next queue_greedy with
  // token < 0 (which takes it as its token), queues its read-back into the backend's read-back slot `slot`,
  // advances n_past and returns without waiting. greedy_token(slot) waits for that id. Between a
  // queue_greedy and the next, no other forward may run on this model. df::Error where the model cannot
  // (a layer split); queues_greedy() says which.
  virtual bool queues_greedy() const { return false; }
  // Whether queuing ahead gains anything here (the backend computes apart from the host: a GPU).
  virtual bool greedy_runs_ahead() const { return false; }
  virtual void queue_greedy(ModelState& state, int32_t token, int slot);
  virtual int32_t greedy_token(int slot);
  virtual ExpertProvider& experts() = 0;
  // Every later forward reports its routing to `sink` (null: to nobody). The sink must outlive its use.
  virtual void set_routing_sink(RoutingSink* sink) = 0;
};

// Dispatches on general.architecture. Throws df::Error for an unsupported architecture and for missing,
// misshapen or mistyped tensors and keys (naming the tensor or key, what was expected and what was found).
std::unique_ptr<Model> load_model(const gguf::File& file, const LoadOptions& options = {});
// The architectures load_model() runs, as error messages list them.
inline constexpr const char* kSupportedArchitectures = "lfm2moe, qwen3moe, gpt-oss, hy_v3, gemma4, qwen35moe";

}  // namespace df::models

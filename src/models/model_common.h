#pragma once
// What the MoE architectures share around their layers: the checks and skeleton of forward() (embeddings,
// layers, final norm and head, capture), and the loader's common steps (routed-expert layouts, activation
// scratch size, expert provider, ModelInfo).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "models/expert_provider.h"
#include "models/model.h"
#include "models/sequence_state.h"
#include "util/error.h"

namespace df::models {

class WeightLoader;

// Model::forward's checks before the state is touched, with `arch` naming the model in the messages.
void check_forward_args(std::string_view arch, const ModelState& state, std::span<const int32_t> tokens,
                        std::span<const float> logits, bool all_rows, int n_vocab);

// The dense weights around the layers.
struct TrunkWeights {
  const backend::Weight& tok_embd;
  backend::Buf<const float> output_norm;
  float eps;
  const backend::Weight& output;
  float embd_scale = 1.0f;     // the embeddings are multiplied by it when not 1 (gemma4: sqrt(H))
  float logit_softcap = 0.0f;  // when not 0: logits = c · tanh(logits / c) (gemma4's final soft-capping)
};

// The layers one model of a layer split runs (models/layer_split.h; all of them otherwise) and the residual
// stream crossing its ends: a stage that starts after layer 0 takes x from `hidden` (T × n_embd host floats)
// instead of embedding the tokens; one that ends before the last layer leaves x in `hidden` instead of
// computing logits.
struct TrunkStage {
  int first = 0, end = 0;
  std::span<float> hidden;
};

// The key of a forward step (Backend::begin_step): what its op sequence depends on besides the positions
// (each sequence's state, rows and logit rows).
uint64_t step_key(const SequenceBatch& batch, size_t n_logits);

// Clears the capture for a batch of T tokens: k routing slots per token of each of the n_moe MoE layers,
// and the per-layer residual stream when wanted.
void begin_capture(ForwardCapture* capture, size_t n_moe, int64_t T, int k, int n_layer, int64_t n_embd);
void capture_layer(backend::Backend& be, ForwardCapture* capture, int il, backend::Buf<const float> x,
                   int64_t T, int64_t n_embd);

// The forward skeleton over a batch of sequences: token ids and positions (each segment's from its n_past)
// uploaded, the capture cleared for the batch, embeddings into the work state's x, run_layer(il) for every
// layer of the stage (recording the residual stream when the capture wants it), then the final norm of each
// segment's logit rows gathered into xn, the head on those rows at once, each segment's logits read back into
// its span, and each n_past advanced. A stage of a layer split replaces the embeddings or the head by the
// hand-over of x (TrunkStage).
template <class RunLayer>
void run_trunk(backend::Backend& be, const TrunkWeights& w, const SequenceBatch& batch, int n_layer,
               int64_t n_embd, size_t n_moe, int k, int n_vocab, ForwardCapture* capture, bool reads_back,
               const TrunkStage& stage, RunLayer&& run_layer) {
  TrunkBuffers& b = batch.work->trunk;
  const int64_t T = batch.T, H = n_embd;
  const bool embeds = stage.first == 0, heads = stage.end == n_layer;
  const size_t hidden_floats = static_cast<size_t>(T * H);
  if ((!embeds || !heads) && stage.hidden.size() < hidden_floats)
    fail("internal: layer split hand-over of {} floats for a batch of {}", stage.hidden.size(),
         hidden_floats);
  for (const BatchSegment& s : batch.segments)
    for (int64_t t = 0; t < s.rows; ++t) {
      const size_t r = static_cast<size_t>(s.row0 + t);
      b.pos_host[r] = static_cast<int32_t>(s.n_past + t);
      b.tokens_host[r] = s.tokens[static_cast<size_t>(t)];
    }
  be.upload(b.pos.view(), b.pos_host.data(), static_cast<size_t>(T));
  if (!batch.token_on_device) be.upload(b.tokens.view(), b.tokens_host.data(), static_cast<size_t>(T));
  const bool greedy = batch.greedy_slot >= 0;
  if (greedy && (T != 1 || batch.segments.size() != 1 || !embeds || !heads))
    fail("internal: a greedy step queued ahead is one token of one sequence through the whole model");
  if (embeds) begin_capture(capture, n_moe, T, k, n_layer, H);
  if (!embeds) be.upload(b.x.view(), stage.hidden.data(), hidden_floats);

  const size_t n_logits = heads ? static_cast<size_t>(batch.logit_rows) * static_cast<size_t>(n_vocab) : 0;
  if (heads) b.logits.resize(be, n_logits, "logits");
  // With a capture (residuals and routing) or `reads_back` (a routing sink), the host reads between the ops:
  // such a forward is not one step.
  std::optional<backend::StepScope> step;
  if (!capture && !reads_back) step.emplace(be, step_key(batch, n_logits));

  if (embeds) {
    be.get_rows(w.tok_embd, b.tokens.view(), T, b.x.view());
    if (w.embd_scale != 1.0f) be.scale(b.x.view(), T * H, w.embd_scale);
  }
  for (int il = stage.first; il < stage.end; ++il) {
    run_layer(il);
    capture_layer(be, capture, il, b.x.view(), T, H);
  }

  if (heads) {
    int64_t out = 0;
    for (const BatchSegment& s : batch.segments) {
      const auto last = b.x.view().sub(static_cast<size_t>((s.row0 + s.rows - s.logit_rows) * H));
      be.rms_norm(last, s.logit_rows, H, w.output_norm, w.eps, b.xn.view().sub(static_cast<size_t>(out * H)));
      out += s.logit_rows;
    }
    be.matmul(w.output, b.xn.view(), batch.logit_rows, b.logits.view(), b.scratch.view());
    if (w.logit_softcap != 0.0f) be.softcap(b.logits.view(), static_cast<int64_t>(n_logits), w.logit_softcap);
    // The next greedy step's token, where its get_rows reads it.
    if (greedy) be.argmax(b.logits.view(), 1, n_vocab, b.tokens.view());
  }
  if (step) step->end();
  if (greedy) {
    be.queue_read_back(batch.greedy_slot, backend::Buf<const uint8_t>(b.tokens.view().bytes()),
                       sizeof(int32_t));
    batch.segments.front().state->n_past += 1;
    return;
  }
  if (!heads) be.download(stage.hidden.data(), backend::Buf<const float>(b.x.view()), hidden_floats);
  int64_t out = 0;
  for (const BatchSegment& s : batch.segments) {
    if (heads) {
      const size_t n = static_cast<size_t>(s.logit_rows) * static_cast<size_t>(n_vocab);
      be.download(s.logits.data(),
                  b.logits.view().sub(static_cast<size_t>(out) * static_cast<size_t>(n_vocab), n), n);
      out += s.logit_rows;
    }
    s.state->n_past += static_cast<int>(s.rows);
  }
}

// Each segment's K and V (rows of k and v, kv_dim wide) stored in its own KV cache of layer il at its
// positions, and the attention of its rows of q (q_dim wide) over that cache into its rows of att.
void attend_segments(backend::Backend& be, const SequenceBatch& batch, int il,
                     const backend::AttentionParams& p, int64_t q_dim, int64_t kv_dim);

// The GQA attention of lfm2moe, qwen3moe, hy_v3 and qwen35moe on b.xn (the normed residual; given attn_norm,
// the attention norms b.x into b.xn itself, with eps, as part of the Q/K/V products: Backend::
// norm_matmul_many): Q, K and V in one grouped matmul, per-head RMS norm of Q and K, NeoX RoPE over the first
// n_rot dims of each head, the f16 KV cache, causal attention, and the output projection added to the
// residual b.x (Backend::matmul_add, b.mix its scratch). With an output gate (qwen35moe), its projection of
// b.xn (into `gate`, n_head · head_dim per row) multiplies the attention output through a sigmoid before the
// projection.
struct QkNormAttention {
  const backend::Weight &wq, &wk, &wv, &wo;
  backend::Buf<const float> q_norm;
  backend::Buf<const float> k_norm;
  int n_head, n_head_kv, head_dim, n_rot;
  float eps, rope_theta, rope_freq_scale;
  float scale = 0.0f;  // the attention scale; 0: 1 / sqrt(head_dim)
  const backend::Weight* wgate = nullptr;
  backend::Buf<float> gate{};
};
void qk_norm_attention(backend::Backend& be, const QkNormAttention& a, const SequenceBatch& batch, int il,
                       backend::Buf<const float> attn_norm = {});

// One gated FFN over all T rows of x into out (the dense FFN layers, gemma4's dense branch, a shared expert):
// a single backend ffn() task.
void dense_ffn(backend::Backend& be, const backend::Weight& gate, const backend::Weight& up,
               const backend::Weight& down, const backend::ActivationParams& act, backend::Buf<const float> x,
               int64_t T, backend::Buf<float> out);

// The always-on shared expert beside the routed ones (hy_v3, qwen35moe): its SwiGLU FFN of b.xn, scaled per
// token by sigmoid(gate_inp · b.xn) when gate_inp is given (qwen35moe; gate_out holds the T gate logits).
struct SharedExpert {
  const backend::Weight &gate, &up, &down;
  const backend::Weight* gate_inp = nullptr;
  backend::Buf<float> gate_out{};
};
// The shared expert's output on b.xn into b.mix (gated per token when gate_inp is given). The MoE layers
// then add the routed experts' weighted sum onto it (add_experts) and b.mix into b.x: llama.cpp's order (the
// routed sum and the shared output first, then the residual; f32 addition commutes).
void shared_expert(backend::Backend& be, TrunkBuffers& b, const SharedExpert& s, int64_t T, int64_t n_embd);

// The widest activation row any matmul quantizes: the scratch one token needs, sized once at load.
class ActRowBytes {
 public:
  explicit ActRowBytes(const backend::Backend& be) : be_(be) {}
  void add(const backend::Weight& w);  // an absent weight (no data) adds nothing
  void add(const ExpertLayout& layout);
  size_t bytes() const { return bytes_; }

 private:
  void widen(GgmlType t, int64_t n_in);
  const backend::Backend& be_;
  size_t bytes_ = 0;
};

// The options' provider of the routed experts, else every expert resident.
// The resident provider holds the MoE layers of model layers [first_layer, end_layer) only.
std::unique_ptr<ExpertProvider> make_expert_provider(const gguf::File& file, const LoadOptions& options,
                                                     const ExpertLayout& layout, backend::Backend& backend,
                                                     int first_layer, int end_layer);

// The ModelInfo fields every MoE config has (name, sizes, head and expert counts, eps), the MoE layers from
// the layout.
template <class Config>
ModelInfo moe_model_info(std::string arch, const Config& c, const ExpertLayout& layout,
                         std::vector<bool> attn_layers, float rope_theta) {
  ModelInfo info;
  info.arch = std::move(arch);
  info.name = c.name;
  info.n_vocab = c.n_vocab;
  info.n_ctx_train = c.n_ctx_train;
  info.n_layer = c.n_layer;
  info.n_embd = c.n_embd;
  info.n_head = c.n_head;
  info.n_head_kv = c.n_head_kv;
  info.head_dim = c.head_dim;
  info.n_expert = c.n_expert;
  info.n_expert_used = c.n_expert_used;
  for (const auto& el : layout.layers) info.moe_layers.push_back(el.model_layer);
  info.attn_layers = std::move(attn_layers);
  info.rms_eps = c.eps;
  info.rope_theta = rope_theta;
  return info;
}

}  // namespace df::models

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
};

// The forward skeleton: token ids and positions uploaded, the capture cleared for the batch, embeddings
// into b.x, run_layer(il) for every layer (recording the residual stream when the capture wants it), then
// the final norm and the head on the last row (or every row) into b.logits, read back into `logits`, and
// n_past advanced. n_moe routing slots per token are cleared in the capture.
// The key of a forward step (Backend::begin_step): what its op sequence depends on besides the positions.
uint64_t step_key(const void* state, int64_t T, int64_t logit_rows, size_t n_logits);

template <class RunLayer>
void run_trunk(backend::Backend& be, const TrunkWeights& w, TrunkBuffers& b, ModelState& state,
               std::span<const int32_t> tokens, std::span<float> logits, bool all_rows, int n_layer,
               int64_t n_embd, size_t n_moe, int k, ForwardCapture* capture, bool reads_back,
               RunLayer&& run_layer);

// Clears the capture for a batch of T tokens: k routing slots per token of each of the n_moe MoE layers,
// and the per-layer residual stream when wanted.
void begin_capture(ForwardCapture* capture, size_t n_moe, int64_t T, int k, int n_layer, int64_t n_embd);
void capture_layer(backend::Backend& be, ForwardCapture* capture, int il, backend::Buf<const float> x,
                   int64_t T, int64_t n_embd);

template <class RunLayer>
void run_trunk(backend::Backend& be, const TrunkWeights& w, TrunkBuffers& b, ModelState& state,
               std::span<const int32_t> tokens, std::span<float> logits, bool all_rows, int n_layer,
               int64_t n_embd, size_t n_moe, int k, ForwardCapture* capture, bool reads_back,
               RunLayer&& run_layer) {
  const int64_t T = static_cast<int64_t>(tokens.size()), H = n_embd;
  for (int64_t t = 0; t < T; ++t) b.pos_host[static_cast<size_t>(t)] = static_cast<int32_t>(state.n_past + t);
  be.upload(b.pos.view(), b.pos_host.data(), static_cast<size_t>(T));
  be.upload(b.tokens.view(), tokens.data(), static_cast<size_t>(T));
  begin_capture(capture, n_moe, T, k, n_layer, H);

  const int64_t rows = all_rows ? T : 1;
  b.logits.resize(be, logits.size(), "logits");
  // With a capture (residuals and routing) or `reads_back` (a routing sink), the host reads between the ops:
  // such a forward is not one step.
  std::optional<backend::StepScope> step;
  if (!capture && !reads_back) step.emplace(be, step_key(&state, T, rows, logits.size()));

  be.get_rows(w.tok_embd, b.tokens.view(), T, b.x.view());
  for (int il = 0; il < n_layer; ++il) {
    run_layer(il);
    capture_layer(be, capture, il, b.x.view(), T, H);
  }

  const auto last = b.x.view().sub(static_cast<size_t>((T - rows) * H));
  be.rms_norm(last, rows, H, w.output_norm, w.eps, b.xn.view());
  be.matmul(w.output, b.xn.view(), rows, b.logits.view(), b.scratch.view());
  if (step) step->end();
  be.download(logits.data(), b.logits.view(), logits.size());
  state.n_past += static_cast<int>(T);
}

// The GQA attention of lfm2moe and qwen3moe on b.xn (the normed residual): Q, K and V in one grouped matmul,
// per-head RMS norm of Q and K, NeoX RoPE, the f16 KV cache, causal attention, and the output projection
// into b.mix.
struct QkNormAttention {
  const backend::Weight &wq, &wk, &wv, &wo;
  backend::Buf<const float> q_norm;
  backend::Buf<const float> k_norm;
  int n_head, n_head_kv, head_dim, n_rot;
  float eps, rope_theta, rope_freq_scale;
};
void qk_norm_attention(backend::Backend& be, const QkNormAttention& a, const backend::KvCacheView& kv,
                       int n_past, int64_t T, TrunkBuffers& b);

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
std::unique_ptr<ExpertProvider> make_expert_provider(const gguf::File& file, const LoadOptions& options,
                                                     const ExpertLayout& layout, backend::Backend& backend);

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

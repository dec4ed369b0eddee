// qwen3moe hyper-parameters from the GGUF keys (ARCHITECTURES.md 2.1), with the checks llama.cpp makes at
// load time turned into df::Error messages.
#include <cmath>

#include "gguf/gguf.h"
#include "models/gguf_keys.h"
#include "models/moe_config.h"
#include "models/qwen3moe.h"
#include "models/qwen3moe_tensors.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {
Qwen3MoeConfig qwen3moe_config(const gguf::File& f) {
  const std::string arch = f.architecture();
  if (arch != kQwen3MoeArch)
    fail("{}: expected a qwen3moe GGUF, general.architecture is '{}'", f.path(), arch);
  const auto key = [](std::string_view k) { return keys::of(kQwen3MoeArch, k); };
  constexpr int64_t kBig = int64_t{1} << 24;

  Qwen3MoeConfig c;
  c.name = f.get_string("general.name").value_or("");
  c.n_layer = static_cast<int>(require_int_in(f, key(keys::block_count), 1, 4096));
  c.n_embd = static_cast<int>(require_int_in(f, key(keys::embedding_length), 1, kBig));
  c.n_ctx_train = static_cast<int>(f.get_int(key(keys::context_length)).value_or(0));

  const AttentionHeads heads = read_attention_heads(f, std::string(kQwen3MoeArch), c.n_layer, c.n_embd, 4096);
  c.n_head = heads.n_head;
  c.n_head_kv = heads.n_head_kv;
  c.head_dim = heads.head_dim;

  c.rope_theta = static_cast<float>(f.get_float(key(keys::rope_freq_base)).value_or(10000.0));
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    fail("{}: qwen3moe.rope.freq_base {} must be positive", f.path(), c.rope_theta);
  if (auto type = f.get_string(key(keys::rope_scaling_type)); type && *type != "none") {
    if (*type != "linear")
      fail("{}: qwen3moe: rope scaling '{}' is not supported (none, linear)", f.path(), *type);
    const double factor = f.get_float(key(keys::rope_scaling_factor)).value_or(1.0);
    if (!(factor > 0)) fail("{}: qwen3moe.rope.scaling.factor {} must be positive", f.path(), factor);
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  }
  c.eps = static_cast<float>(f.require_float(key(keys::rms_epsilon)));
  if (!(c.eps > 0) || !std::isfinite(c.eps))
    fail("{}: qwen3moe.attention.layer_norm_rms_epsilon {} must be positive", f.path(), c.eps);

  c.n_expert = static_cast<int>(require_int_in(f, key(keys::expert_count), 1, 4096));
  c.n_expert_used = static_cast<int>(require_int_in(f, key(keys::expert_used_count), 1, c.n_expert));
  // llama.cpp falls back to feed_forward_length / expert_used_count when the expert width is absent.
  if (f.has(key(keys::expert_feed_forward_length))) {
    c.n_ff_exp = static_cast<int>(require_int_in(f, key(keys::expert_feed_forward_length), 1, kBig));
  } else {
    const int64_t n_ff = require_int_in(f, key(keys::feed_forward_length), 1, kBig);
    c.n_ff_exp = static_cast<int>(n_ff / c.n_expert_used);
    if (c.n_ff_exp < 1)
      fail("{}: qwen3moe.feed_forward_length {} / expert_used_count {} leaves no expert width", f.path(),
           n_ff, c.n_expert_used);
  }
  if (auto gating = f.get_int(key(keys::expert_gating_func)); gating && *gating != kQwen3MoeSoftmaxGating)
    fail("{}: qwen3moe.expert_gating_func is {}: qwen3moe routes with softmax (1)", f.path(), *gating);
  c.expert_weights_scale = static_cast<float>(f.get_float(key(keys::expert_weights_scale)).value_or(0.0));
  if (!std::isfinite(c.expert_weights_scale))
    fail("{}: qwen3moe.expert_weights_scale is not finite", f.path());

  c.n_vocab = vocab_from_token_embd(f, std::string(kQwen3MoeArch), c.n_embd);
  return c;
}

}  // namespace df::models

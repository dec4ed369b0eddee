// qwen3moe hyper-parameters from the GGUF keys (ARCHITECTURES.md 2.1), with the checks llama.cpp makes at
// load time turned into df::Error messages.
#include <cmath>
#include <set>

#include "gguf/gguf.h"
#include "models/qwen3moe.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {
namespace {

// One value for every layer (the key may be an array), positive.
int uniform_per_layer(const gguf::File& f, const std::string& key, int n_layer) {
  const auto v = per_layer_ints(f, key, n_layer);
  if (std::set<int64_t>(v.begin(), v.end()).size() != 1 || v[0] <= 0 || v[0] > 65536)
    fail("{}: {} must be one positive value for every layer", f.path(), key);
  return static_cast<int>(v[0]);
}

}  // namespace

Qwen3MoeConfig qwen3moe_config(const gguf::File& f) {
  const std::string arch = f.architecture();
  if (arch != "qwen3moe") fail("{}: expected a qwen3moe GGUF, general.architecture is '{}'", f.path(), arch);
  const auto key = [](const char* k) { return std::string("qwen3moe.") + k; };
  constexpr int64_t kBig = int64_t{1} << 24;

  Qwen3MoeConfig c;
  c.name = f.get_string("general.name").value_or("");
  c.n_layer = static_cast<int>(require_int_in(f, key("block_count"), 1, 4096));
  c.n_embd = static_cast<int>(require_int_in(f, key("embedding_length"), 1, kBig));
  c.n_ctx_train = static_cast<int>(f.get_int(key("context_length")).value_or(0));

  c.n_head = uniform_per_layer(f, key("attention.head_count"), c.n_layer);
  c.n_head_kv = f.has(key("attention.head_count_kv"))
                    ? uniform_per_layer(f, key("attention.head_count_kv"), c.n_layer)
                    : c.n_head;
  if (c.n_head % c.n_head_kv != 0)
    fail("{}: {} query heads cannot be grouped over {} KV heads", f.path(), c.n_head, c.n_head_kv);
  // The head size is its own key (Qwen3-30B: 32 heads x 128 over a hidden size of 2048).
  if (!f.has(key("attention.key_length")) && c.n_embd % c.n_head != 0)
    fail(
        "{}: qwen3moe.attention.key_length is absent and the embedding length {} is not a multiple of the "
        "head count {}",
        f.path(), c.n_embd, c.n_head);
  c.head_dim = static_cast<int>(f.get_int(key("attention.key_length")).value_or(c.n_embd / c.n_head));
  if (c.head_dim <= 0 || c.head_dim > 4096 || c.head_dim % 2 != 0)
    fail("{}: qwen3moe.attention.key_length {} must be even and in 2..4096", f.path(), c.head_dim);
  if (auto vl = f.get_int(key("attention.value_length")); vl && *vl != c.head_dim)
    fail("{}: qwen3moe.attention.value_length {} differs from key_length {}", f.path(), *vl, c.head_dim);
  if (auto rot = f.get_int(key("rope.dimension_count")); rot && *rot != c.head_dim)
    fail("{}: qwen3moe.rope.dimension_count {} differs from the head size {} (qwen3moe rotates whole heads)",
         f.path(), *rot, c.head_dim);

  c.rope_theta = static_cast<float>(f.get_float(key("rope.freq_base")).value_or(10000.0));
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    fail("{}: qwen3moe.rope.freq_base {} must be positive", f.path(), c.rope_theta);
  if (auto type = f.get_string(key("rope.scaling.type")); type && *type != "none") {
    if (*type != "linear")
      fail("{}: qwen3moe: rope scaling '{}' is not supported (none, linear)", f.path(), *type);
    const double factor = f.get_float(key("rope.scaling.factor")).value_or(1.0);
    if (!(factor > 0)) fail("{}: qwen3moe.rope.scaling.factor {} must be positive", f.path(), factor);
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  }
  c.eps = static_cast<float>(f.require_float(key("attention.layer_norm_rms_epsilon")));
  if (!(c.eps > 0) || !std::isfinite(c.eps))
    fail("{}: qwen3moe.attention.layer_norm_rms_epsilon {} must be positive", f.path(), c.eps);

  c.n_expert = static_cast<int>(require_int_in(f, key("expert_count"), 1, 4096));
  c.n_expert_used = static_cast<int>(require_int_in(f, key("expert_used_count"), 1, c.n_expert));
  // llama.cpp falls back to feed_forward_length / expert_used_count when the expert width is absent.
  if (f.has(key("expert_feed_forward_length"))) {
    c.n_ff_exp = static_cast<int>(require_int_in(f, key("expert_feed_forward_length"), 1, kBig));
  } else {
    const int64_t n_ff = require_int_in(f, key("feed_forward_length"), 1, kBig);
    c.n_ff_exp = static_cast<int>(n_ff / c.n_expert_used);
    if (c.n_ff_exp < 1)
      fail("{}: qwen3moe.feed_forward_length {} / expert_used_count {} leaves no expert width", f.path(),
           n_ff, c.n_expert_used);
  }
  if (auto gating = f.get_int(key("expert_gating_func")); gating && *gating != 1)
    fail("{}: qwen3moe.expert_gating_func is {}: qwen3moe routes with softmax (1)", f.path(), *gating);
  c.expert_weights_scale = static_cast<float>(f.get_float(key("expert_weights_scale")).value_or(0.0));
  if (!std::isfinite(c.expert_weights_scale))
    fail("{}: qwen3moe.expert_weights_scale is not finite", f.path());

  // The vocabulary is token_embd's row count; the tokenizer's list, when present, must agree.
  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) fail("{}: qwen3moe: missing tensor 'token_embd.weight'", f.path());
  if (embd->n_dims != 2 || embd->ne[0] != c.n_embd)
    fail("{}: qwen3moe: tensor 'token_embd.weight' has shape {}, expected {{{}, n_vocab}}", f.path(),
         embd->shape_string(), c.n_embd);
  if (embd->ne[1] < 1 || embd->ne[1] > kBig)
    fail("{}: qwen3moe: token_embd.weight has {} rows", f.path(), embd->ne[1]);
  c.n_vocab = static_cast<int>(embd->ne[1]);
  if (const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
      toks && toks->is_array() && toks->arr.size() != static_cast<size_t>(c.n_vocab))
    fail("{}: tokenizer.ggml.tokens has {} entries but token_embd.weight has {} rows", f.path(),
         toks->arr.size(), c.n_vocab);
  return c;
}

}  // namespace df::models

// gpt-oss hyper-parameters from the GGUF keys (ARCHITECTURES.md 7.2), with llama.cpp's defaults: sliding
// window pattern of period 2 (even layers slide), SWA RoPE base = the global one, YaRN when
// rope.scaling.type is "yarn" (ext_factor 1, beta_fast 32, beta_slow 1, n_ctx_orig from
// rope.scaling.original_context_length or else context_length).
#include <cmath>
#include <set>

#include "gguf/gguf.h"
#include "models/gpt_oss.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {
namespace {

const std::string kArch = "gpt-oss";
std::string key(const char* k) { return kArch + "." + k; }

int uniform_per_layer(const gguf::File& f, const std::string& k, int n_layer) {
  const auto v = per_layer_ints(f, k, n_layer);
  if (std::set<int64_t>(v.begin(), v.end()).size() != 1 || v[0] <= 0 || v[0] > 65536)
    fail("{}: {} must be one positive value for every layer", f.path(), k);
  return static_cast<int>(v[0]);
}

float positive_float(const gguf::File& f, const std::string& k, double fallback) {
  const double v = f.get_float(k).value_or(fallback);
  if (!(v > 0) || !std::isfinite(v)) fail("{}: {} = {} must be positive", f.path(), k, v);
  return static_cast<float>(v);
}

// The RoPE of both layer kinds: base from the GGUF, scaling as llama.cpp's context derives it.
void read_rope(const gguf::File& f, GptOssConfig& c) {
  gpt_oss::RopeParams& r = c.rope;
  r.n_rot = c.head_dim;
  r.freq_base = positive_float(f, key("rope.freq_base"), 10000.0);
  r.n_ctx_orig =
      static_cast<int>(f.get_int(key("rope.scaling.original_context_length")).value_or(c.n_ctx_train));
  const std::string type = f.get_string(key("rope.scaling.type")).value_or("none");
  const float rope_attn_factor = positive_float(f, key("rope.scaling.attn_factor"), 1.0);
  if (type == "none") {
    r.attn_factor = rope_attn_factor;
  } else if (type == "linear" || type == "yarn") {
    const float factor = positive_float(f, key("rope.scaling.factor"), 1.0);
    r.freq_scale = 1.0f / factor;
    r.attn_factor = rope_attn_factor;
    if (type == "yarn") {
      if (r.n_ctx_orig <= 0)
        fail("{}: gpt-oss: YaRN needs rope.scaling.original_context_length or context_length", f.path());
      r.ext_factor = 1.0f;
      r.beta_fast = positive_float(f, key("rope.scaling.yarn_beta_fast"), 32.0);
      r.beta_slow = positive_float(f, key("rope.scaling.yarn_beta_slow"), 1.0);
      const float log_mul =
          static_cast<float>(f.get_float(key("rope.scaling.yarn_log_multiplier")).value_or(0.0));
      r.attn_factor = gpt_oss::yarn_attn_factor(r.freq_scale, log_mul, rope_attn_factor);
    }
  } else {
    fail("{}: gpt-oss: rope scaling '{}' is not supported (none, linear, yarn)", f.path(), type);
  }
  c.rope_swa = r;
  c.rope_swa.freq_base = positive_float(f, key("rope.freq_base_swa"), r.freq_base);
}

}  // namespace

GptOssConfig gpt_oss_config(const gguf::File& f) {
  const std::string arch = f.architecture();
  if (arch != kArch) fail("{}: expected a gpt-oss GGUF, general.architecture is '{}'", f.path(), arch);
  constexpr int64_t kBig = int64_t{1} << 24;

  GptOssConfig c;
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
  if (!f.has(key("attention.key_length")) && c.n_embd % c.n_head != 0)
    fail(
        "{}: gpt-oss.attention.key_length is absent and the embedding length {} is not a multiple of the "
        "head count {}",
        f.path(), c.n_embd, c.n_head);
  c.head_dim = static_cast<int>(f.get_int(key("attention.key_length")).value_or(c.n_embd / c.n_head));
  if (c.head_dim <= 0 || c.head_dim > 1024 || c.head_dim % 2 != 0)
    fail("{}: gpt-oss.attention.key_length {} must be even and in 2..1024", f.path(), c.head_dim);
  if (auto vl = f.get_int(key("attention.value_length")); vl && *vl != c.head_dim)
    fail("{}: gpt-oss.attention.value_length {} differs from key_length {}", f.path(), *vl, c.head_dim);
  // The graph reshapes Q/K/V heads to n_rot values, so the head size must be the rotated width.
  if (auto rot = f.get_int(key("rope.dimension_count")); rot && *rot != c.head_dim)
    fail("{}: gpt-oss.rope.dimension_count {} differs from the head size {} (gpt-oss rotates whole heads)",
         f.path(), *rot, c.head_dim);

  c.n_swa = static_cast<int>(require_int_in(f, key("attention.sliding_window"), 1, kBig));
  // llama.cpp's set_swa_pattern(P): layer i slides iff i % P < P - 1; gpt-oss uses P = 2.
  const int period =
      static_cast<int>(f.has(key("attention.sliding_window_pattern"))
                           ? require_int_in(f, key("attention.sliding_window_pattern"), 1, 4096)
                           : 2);
  for (int il = 0; il < c.n_layer; ++il) c.swa.push_back(il % period < period - 1);

  f.require_float(key("attention.layer_norm_rms_epsilon"));  // the "missing key" message when absent
  c.eps = positive_float(f, key("attention.layer_norm_rms_epsilon"), 0.0);
  read_rope(f, c);

  c.n_expert = static_cast<int>(require_int_in(f, key("expert_count"), 1, 4096));
  c.n_expert_used = static_cast<int>(require_int_in(f, key("expert_used_count"), 1, c.n_expert));
  c.n_ff_exp = static_cast<int>(require_int_in(f, key("expert_feed_forward_length"), 1, kBig));
  if (auto gating = f.get_int(key("expert_gating_func")); gating && *gating != 3)
    fail("{}: gpt-oss.expert_gating_func is {}: gpt-oss routes with softmax over the chosen weights (3)",
         f.path(), *gating);
  if (auto s = f.get_float(key("expert_weights_scale")); s && *s != 0.0 && *s != 1.0)
    fail(
        "{}: gpt-oss.expert_weights_scale {} is not applied by llama.cpp's gpt-oss graph; refusing a file "
        "that expects it",
        f.path(), *s);

  // The vocabulary is token_embd's row count; the tokenizer's list, when present, must agree.
  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) fail("{}: gpt-oss: missing tensor 'token_embd.weight'", f.path());
  if (embd->n_dims != 2 || embd->ne[0] != c.n_embd)
    fail("{}: gpt-oss: tensor 'token_embd.weight' has shape {}, expected {{{}, n_vocab}}", f.path(),
         embd->shape_string(), c.n_embd);
  if (embd->ne[1] < 1 || embd->ne[1] > kBig)
    fail("{}: gpt-oss: token_embd.weight has {} rows", f.path(), embd->ne[1]);
  c.n_vocab = static_cast<int>(embd->ne[1]);
  if (const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
      toks && toks->is_array() && toks->arr.size() != static_cast<size_t>(c.n_vocab))
    fail("{}: tokenizer.ggml.tokens has {} entries but token_embd.weight has {} rows", f.path(),
         toks->arr.size(), c.n_vocab);
  return c;
}

}  // namespace df::models

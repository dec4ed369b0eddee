// gpt-oss hyper-parameters from the GGUF keys (ARCHITECTURES.md 7.2), with llama.cpp's defaults: sliding
// window pattern of period 2 (even layers slide), SWA RoPE base = the global one, YaRN when
// rope.scaling.type is "yarn" (ext_factor 1, beta_fast 32, beta_slow 1, n_ctx_orig from
// rope.scaling.original_context_length or else context_length).
#include <cmath>

#include "gguf/gguf.h"
#include "models/gguf_keys.h"
#include "models/gpt_oss.h"
#include "models/gpt_oss_tensors.h"
#include "models/moe_config.h"
#include "models/rope_scaling.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {
namespace {

const std::string kArch(kGptOssArch);
std::string key(std::string_view k) { return keys::of(kArch, k); }

float positive_float(const gguf::File& f, const std::string& k, double fallback) {
  const double v = f.get_float(k).value_or(fallback);
  if (!(v > 0) || !std::isfinite(v)) fail("{}: {} = {} must be positive", f.path(), k, v);
  return static_cast<float>(v);
}

// The RoPE of both layer kinds: base from the GGUF, scaling as llama.cpp's context derives it.
void read_rope(const gguf::File& f, GptOssConfig& c) {
  backend::RopeParams& r = c.rope;
  r.n_rot = c.head_dim;
  r.freq_base = positive_float(f, key(keys::rope_freq_base), 10000.0);
  r.n_ctx_orig = static_cast<int>(f.get_int(key(keys::rope_scaling_orig_ctx)).value_or(c.n_ctx_train));
  const std::string type = f.get_string(key(keys::rope_scaling_type)).value_or("none");
  const float rope_attn_factor = positive_float(f, key(keys::rope_scaling_attn_factor), 1.0);
  if (type == "none") {
    r.attn_factor = rope_attn_factor;
  } else if (type == "linear" || type == "yarn") {
    const float factor = positive_float(f, key(keys::rope_scaling_factor), 1.0);
    r.freq_scale = 1.0f / factor;
    r.attn_factor = rope_attn_factor;
    if (type == "yarn") {
      if (r.n_ctx_orig <= 0)
        fail("{}: gpt-oss: YaRN needs rope.scaling.original_context_length or context_length", f.path());
      r.ext_factor = 1.0f;
      r.beta_fast = positive_float(f, key(keys::rope_yarn_beta_fast), 32.0);
      r.beta_slow = positive_float(f, key(keys::rope_yarn_beta_slow), 1.0);
      const float log_mul =
          static_cast<float>(f.get_float(key(keys::rope_yarn_log_multiplier)).value_or(0.0));
      r.attn_factor = yarn_attn_factor(r.freq_scale, log_mul, rope_attn_factor);
    }
  } else {
    fail("{}: gpt-oss: rope scaling '{}' is not supported (none, linear, yarn)", f.path(), type);
  }
  c.rope_swa = r;
  c.rope_swa.freq_base = positive_float(f, key(keys::rope_freq_base_swa), r.freq_base);
}

}  // namespace

GptOssConfig gpt_oss_config(const gguf::File& f) {
  const std::string arch = f.architecture();
  if (arch != kArch) fail("{}: expected a gpt-oss GGUF, general.architecture is '{}'", f.path(), arch);
  constexpr int64_t kBig = int64_t{1} << 24;

  GptOssConfig c;
  c.name = f.get_string("general.name").value_or("");
  c.n_layer = static_cast<int>(require_int_in(f, key(keys::block_count), 1, 4096));
  c.n_embd = static_cast<int>(require_int_in(f, key(keys::embedding_length), 1, kBig));
  c.n_ctx_train = static_cast<int>(f.get_int(key(keys::context_length)).value_or(0));

  const AttentionHeads heads = read_attention_heads(f, kArch, c.n_layer, c.n_embd, 1024);
  c.n_head = heads.n_head;
  c.n_head_kv = heads.n_head_kv;
  c.head_dim = heads.head_dim;

  c.n_swa = static_cast<int>(require_int_in(f, key(keys::sliding_window), 1, kBig));
  // llama.cpp's set_swa_pattern(P): layer i slides iff i % P < P - 1; gpt-oss uses P = 2.
  const int period = static_cast<int>(f.has(key(keys::sliding_window_pattern))
                                          ? require_int_in(f, key(keys::sliding_window_pattern), 1, 4096)
                                          : 2);
  for (int il = 0; il < c.n_layer; ++il) c.swa.push_back(il % period < period - 1);

  f.require_float(key(keys::rms_epsilon));  // the "missing key" message when absent
  c.eps = positive_float(f, key(keys::rms_epsilon), 0.0);
  read_rope(f, c);

  c.n_expert = static_cast<int>(require_int_in(f, key(keys::expert_count), 1, 4096));
  c.n_expert_used = static_cast<int>(require_int_in(f, key(keys::expert_used_count), 1, c.n_expert));
  c.n_ff_exp = static_cast<int>(require_int_in(f, key(keys::expert_feed_forward_length), 1, kBig));
  if (auto gating = f.get_int(key(keys::expert_gating_func)); gating && *gating != kGptOssSoftmaxWeightGating)
    fail("{}: gpt-oss.expert_gating_func is {}: gpt-oss routes with softmax over the chosen weights (3)",
         f.path(), *gating);
  if (auto s = f.get_float(key(keys::expert_weights_scale)); s && *s != 0.0 && *s != 1.0)
    fail(
        "{}: gpt-oss.expert_weights_scale {} is not applied by llama.cpp's gpt-oss graph; refusing a file "
        "that expects it",
        f.path(), *s);

  c.n_vocab = vocab_from_token_embd(f, kArch, c.n_embd);
  return c;
}

}  // namespace df::models

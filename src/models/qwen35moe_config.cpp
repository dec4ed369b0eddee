// qwen35moe hyper-parameters from the GGUF keys (ARCHITECTURES.md 5.1), read as llama.cpp's
// llama_model_qwen35moe::load_arch_hparams reads them, with its load-time checks turned into df::Error
// messages.
#include <cmath>

#include "gguf/gguf.h"
#include "models/gguf_keys.h"
#include "models/moe_config.h"
#include "models/qwen35moe.h"
#include "models/qwen35moe_tensors.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {
namespace {

constexpr int64_t kBig = int64_t{1} << 24;

// Which of the first n_layer layers are delta-net layers: attention.recurrent_layers when present (one bool
// per block), else every layer but each full_attention_interval-th (llama.cpp's rule).
std::vector<bool> recurrent_layers(const gguf::File& f, int n_blocks, int n_layer) {
  const auto key = [](std::string_view k) { return keys::of(kQwen35MoeArch, k); };
  std::vector<bool> out;
  if (const gguf::Value* v = f.find(key(keys::recurrent_layers))) {
    if (!v->is_array() || v->arr.size() != static_cast<size_t>(n_blocks))
      fail("{}: qwen35moe.attention.recurrent_layers must be an array of one flag per block ({})", f.path(),
           n_blocks);
    for (int il = 0; il < n_layer; ++il)
      out.push_back(v->arr[static_cast<size_t>(il)].as_bool(key(keys::recurrent_layers)));
    return out;
  }
  const int64_t interval = f.get_int(key(keys::full_attention_interval)).value_or(4);
  if (interval < 1 || interval > kBig)
    fail("{}: qwen35moe.full_attention_interval {} must be positive", f.path(), interval);
  for (int il = 0; il < n_layer; ++il) out.push_back((il + 1) % interval != 0);
  return out;
}

}  // namespace

Qwen35MoeConfig qwen35moe_config(const gguf::File& f) {
  const std::string arch = f.architecture();
  if (arch != kQwen35MoeArch)
    fail("{}: expected a qwen35moe GGUF, general.architecture is '{}'", f.path(), arch);
  const auto key = [](std::string_view k) { return keys::of(kQwen35MoeArch, k); };
  const auto ranged = [&](std::string_view k, int64_t lo, int64_t hi) {
    return static_cast<int>(require_int_in(f, key(k), lo, hi));
  };

  Qwen35MoeConfig c;
  c.name = f.get_string("general.name").value_or("");
  // block_count includes the trailing multi-token-prediction blocks, which the main pass does not run.
  const int n_blocks = ranged(keys::block_count, 1, 4096);
  c.n_nextn = static_cast<int>(f.get_int(key(keys::nextn_predict_layers)).value_or(0));
  if (c.n_nextn < 0 || c.n_nextn >= n_blocks)
    fail("{}: qwen35moe.nextn_predict_layers {} leaves no layer of the {} blocks to run", f.path(), c.n_nextn,
         n_blocks);
  c.n_layer = n_blocks - c.n_nextn;
  c.n_embd = ranged(keys::embedding_length, 1, kBig);
  c.n_ctx_train = static_cast<int>(f.get_int(key(keys::context_length)).value_or(0));
  c.recurrent = recurrent_layers(f, n_blocks, c.n_layer);

  // Attention layers: one head count for every layer (llama.cpp's n_head_kv may be per layer; the
  // attention layers' is what counts, and the converter writes one value).
  c.n_head = ranged(keys::head_count, 1, 4096);
  const std::vector<int64_t> kv = per_layer_ints(f, key(keys::head_count_kv), n_blocks);
  c.n_head_kv = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    if (c.recurrent[static_cast<size_t>(il)]) continue;
    const int64_t h = kv[static_cast<size_t>(il)];
    if (c.n_head_kv != 0 && h != c.n_head_kv)
      fail("{}: qwen35moe: attention layers with {} and {} KV heads: one count is supported", f.path(),
           c.n_head_kv, h);
    c.n_head_kv = static_cast<int>(h);
  }
  if (c.n_head_kv == 0) c.n_head_kv = static_cast<int>(kv[0]);
  if (c.n_head_kv < 1 || c.n_head % c.n_head_kv != 0)
    fail("{}: qwen35moe: {} query heads over {} KV heads (a positive divisor is needed)", f.path(), c.n_head,
         c.n_head_kv);
  c.head_dim = ranged(keys::key_length, 2, 1024);
  if (const auto v = f.get_int(key(keys::value_length)); v && *v != c.head_dim)
    fail("{}: qwen35moe: key_length {} and value_length {} differ (llama.cpp requires them equal)", f.path(),
         c.head_dim, *v);
  c.n_rot = static_cast<int>(f.get_int(key(keys::rope_dimension_count)).value_or(c.head_dim));
  if (c.n_rot < 2 || c.n_rot > c.head_dim || c.n_rot % 2 != 0)
    fail("{}: qwen35moe.rope.dimension_count {} must be even and at most the head size {}", f.path(), c.n_rot,
         c.head_dim);
  // IMRoPE's sections are required; for text every section sees the token's position, so the rotation is
  // NeoX over the first n_rot dims whatever they are (ARCHITECTURES.md 5.3).
  const gguf::Value& sections = f.require(key(keys::rope_dimension_sections));
  if (!sections.is_array() || sections.arr.size() < 4)
    fail("{}: qwen35moe.rope.dimension_sections must hold 4 integers", f.path());
  c.rope_theta = static_cast<float>(f.get_float(key(keys::rope_freq_base)).value_or(10000.0));
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    fail("{}: qwen35moe.rope.freq_base {} must be positive", f.path(), c.rope_theta);
  if (auto type = f.get_string(key(keys::rope_scaling_type)); type && *type != "none")
    fail("{}: qwen35moe: rope scaling '{}' is not supported", f.path(), *type);
  c.attn_scale = static_cast<float>(f.get_float(key(keys::attention_scale)).value_or(0.0));
  if (!std::isfinite(c.attn_scale) || c.attn_scale < 0)
    fail("{}: qwen35moe.attention.scale {} must be a finite number >= 0", f.path(), c.attn_scale);
  c.eps = static_cast<float>(f.require_float(key(keys::rms_epsilon)));
  if (!(c.eps > 0) || !std::isfinite(c.eps))
    fail("{}: qwen35moe.attention.layer_norm_rms_epsilon {} must be positive", f.path(), c.eps);

  // Delta-net layers.
  c.conv_taps = ranged(keys::ssm_conv_kernel, 2, 64);
  c.dn_head_dim = ranged(keys::ssm_state_size, 1, 512);
  c.dn_k_heads = ranged(keys::ssm_group_count, 1, 4096);
  c.dn_v_heads = ranged(keys::ssm_time_step_rank, 1, 4096);
  const int64_t inner = require_int_in(f, key(keys::ssm_inner_size), 1, kBig);
  if (inner != int64_t{c.dn_v_heads} * c.dn_head_dim)
    fail(
        "{}: qwen35moe.ssm.inner_size {} is not time_step_rank {} x state_size {} (the value heads' size "
        "must equal the key heads')",
        f.path(), inner, c.dn_v_heads, c.dn_head_dim);
  if (c.dn_v_heads % c.dn_k_heads != 0)
    fail(
        "{}: qwen35moe: {} value heads (ssm.time_step_rank) over {} key heads (ssm.group_count): value heads "
        "must be a multiple",
        f.path(), c.dn_v_heads, c.dn_k_heads);

  // Experts: every layer routes (llama.cpp requires ffn_gate_inp on each).
  c.n_expert = ranged(keys::expert_count, 1, 4096);
  c.n_expert_used = ranged(keys::expert_used_count, 1, c.n_expert);
  c.n_ff_exp = static_cast<int>(per_layer_ints(f, key(keys::expert_feed_forward_length), n_blocks)[0]);
  if (c.n_ff_exp < 1 || c.n_ff_exp > kBig)
    fail("{}: qwen35moe.expert_feed_forward_length {} is out of range (1..{})", f.path(), c.n_ff_exp, kBig);
  c.n_ff_shexp = f.get_int(key(keys::expert_shared_feed_forward_length)).value_or(0);
  if (c.n_ff_shexp == 0) c.n_ff_shexp = c.n_ff_exp;
  if (c.n_ff_shexp < 1 || c.n_ff_shexp > kBig)
    fail("{}: qwen35moe.expert_shared_feed_forward_length {} is out of range (1..{})", f.path(), c.n_ff_shexp,
         kBig);
  c.expert_weights_scale = static_cast<float>(f.get_float(key(keys::expert_weights_scale)).value_or(0.0));
  if (!std::isfinite(c.expert_weights_scale))
    fail("{}: qwen35moe.expert_weights_scale is not finite", f.path());

  c.n_vocab = vocab_from_token_embd(f, std::string(kQwen35MoeArch), c.n_embd);
  return c;
}

}  // namespace df::models

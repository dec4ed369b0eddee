// lfm2moe hyper-parameters from the GGUF keys (ARCHITECTURES.md 3.1), checked as the seed engine checks them.
#include <algorithm>
#include <cmath>
#include <set>

#include "gguf/gguf.h"
#include "models/gguf_keys.h"
#include "models/lfm2moe.h"
#include "models/lfm2moe_tensors.h"
#include "models/moe_config.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {

Lfm2MoeConfig lfm2moe_config(const gguf::File& f) {
  const std::string arch = f.architecture();
  if (arch != kLfm2MoeArch)
    fail("{}: expected an lfm2moe GGUF, general.architecture is '{}'", f.path(), arch);
  const auto key = [](std::string_view k) { return keys::of(kLfm2MoeArch, k); };
  constexpr int64_t kBig = int64_t{1} << 24;

  Lfm2MoeConfig c;
  c.name = f.get_string("general.name").value_or("");
  c.n_layer = static_cast<int>(require_int_in(f, key(keys::block_count), 1, 4096));
  c.n_embd = static_cast<int>(require_int_in(f, key(keys::embedding_length), 1, kBig));
  c.n_ctx_train = static_cast<int>(f.get_int(key(keys::context_length)).value_or(0));

  const int64_t gating = f.require_int(key(keys::expert_gating_func));
  if (gating != kLfm2MoeSigmoidGating)
    fail("{}: lfm2moe.expert_gating_func is {}: this engine implements sigmoid gating (2) only", f.path(),
         gating);

  const auto heads = per_layer_ints(f, key(keys::head_count), c.n_layer);
  if (std::set<int64_t>(heads.begin(), heads.end()).size() != 1 || heads[0] <= 0)
    fail("{}: lfm2moe.attention.head_count must be one positive value for every layer", f.path());
  c.n_head = static_cast<int>(heads[0]);
  if (c.n_embd % c.n_head != 0)
    fail("{}: embedding length {} is not a multiple of the head count {}", f.path(), c.n_embd, c.n_head);
  c.head_dim = c.n_embd / c.n_head;
  if (auto kl = f.get_int(key(keys::key_length)); kl && *kl != c.head_dim)
    fail("{}: lfm2moe.attention.key_length {} differs from n_embd / n_head = {}", f.path(), *kl, c.head_dim);
  if (auto vl = f.get_int(key(keys::value_length)); vl && *vl != c.head_dim)
    fail("{}: lfm2moe.attention.value_length {} differs from n_embd / n_head = {}", f.path(), *vl,
         c.head_dim);

  // A layer is a short-conv layer iff its KV head count is 0.
  const auto kv = per_layer_ints(f, key(keys::head_count_kv), c.n_layer);
  std::set<int64_t> kv_attn;
  for (int64_t n : kv) {
    c.attn.push_back(n > 0);
    if (n > 0) kv_attn.insert(n);
  }
  if (kv_attn.size() > 1)
    fail("{}: lfm2moe: attention layers with different KV head counts ({}) are not supported", f.path(),
         fmt::join(kv_attn, ", "));
  c.n_head_kv = kv_attn.empty() ? 0 : static_cast<int>(*kv_attn.begin());
  if (c.n_head_kv > 0 && c.n_head % c.n_head_kv != 0)
    fail("{}: {} query heads cannot be grouped over {} KV heads", f.path(), c.n_head, c.n_head_kv);
  c.n_rot = static_cast<int>(f.get_int(key(keys::rope_dimension_count)).value_or(c.head_dim));
  if (c.n_rot <= 0 || c.n_rot % 2 != 0 || c.n_rot > c.head_dim)
    fail("{}: lfm2moe.rope.dimension_count {} must be even and at most the head dim {}", f.path(), c.n_rot,
         c.head_dim);
  c.rope_theta = static_cast<float>(f.get_float(key(keys::rope_freq_base)).value_or(10000.0));
  if (auto type = f.get_string(key(keys::rope_scaling_type)); type && *type != "none") {
    if (*type != "linear")
      fail("{}: lfm2moe: rope scaling '{}' is not supported (none, linear)", f.path(), *type);
    const double factor = f.get_float(key(keys::rope_scaling_factor)).value_or(1.0);
    if (!(factor > 0)) fail("{}: lfm2moe.rope.scaling.factor {} must be positive", f.path(), factor);
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  }
  c.eps = static_cast<float>(f.require_float(key(keys::rms_epsilon)));
  if (!(c.eps > 0) || !std::isfinite(c.eps))
    fail("{}: lfm2moe.attention.layer_norm_rms_epsilon {} must be positive", f.path(), c.eps);

  c.n_dense_lead = static_cast<int>(f.get_int(key(keys::leading_dense_block_count)).value_or(0));
  if (c.n_dense_lead < 0 || c.n_dense_lead > c.n_layer)
    fail("{}: lfm2moe.leading_dense_block_count {} is out of range (0..{})", f.path(), c.n_dense_lead,
         c.n_layer);
  c.n_ff = c.n_dense_lead > 0 ? per_layer_ints(f, key(keys::feed_forward_length), c.n_layer)
                              : std::vector<int64_t>(static_cast<size_t>(c.n_layer), 0);
  for (int il = 0; il < c.n_dense_lead; ++il)
    if (c.n_ff[static_cast<size_t>(il)] <= 0 || c.n_ff[static_cast<size_t>(il)] > kBig)
      fail("{}: lfm2moe.feed_forward_length of dense layer {} is {}", f.path(), il,
           c.n_ff[static_cast<size_t>(il)]);
  if (c.n_dense_lead < c.n_layer) {
    c.n_expert = static_cast<int>(require_int_in(f, key(keys::expert_count), 1, 4096));
    c.n_expert_used = static_cast<int>(require_int_in(f, key(keys::expert_used_count), 1, c.n_expert));
    c.n_ff_exp = static_cast<int>(require_int_in(f, key(keys::expert_feed_forward_length), 1, kBig));
  }
  if (std::find(c.attn.begin(), c.attn.end(), false) != c.attn.end())
    c.l_cache = static_cast<int>(require_int_in(f, key(keys::shortconv_l_cache), 2, 64));

  c.n_vocab = vocab_from_token_embd(f, "lfm2moe", c.n_embd);
  return c;
}

}  // namespace df::models

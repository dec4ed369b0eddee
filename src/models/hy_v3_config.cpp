// hy_v3 hyper-parameters from the GGUF keys (ARCHITECTURES.md 6.1), read as llama.cpp's
// llama_model_hy_v3::load_arch_hparams reads them, with its load-time checks turned into df::Error messages.
#include <fmt/format.h>

#include <cmath>

#include "gguf/gguf.h"
#include "models/gguf_keys.h"
#include "models/hy_v3.h"
#include "models/hy_v3_tensors.h"
#include "models/moe_config.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {

HyV3Config hy_v3_config(const gguf::File& f) {
  const std::string arch = f.architecture();
  if (arch != kHyV3Arch) fail("{}: expected a hy_v3 GGUF, general.architecture is '{}'", f.path(), arch);
  const auto key = [](std::string_view k) { return keys::of(kHyV3Arch, k); };
  constexpr int64_t kBig = int64_t{1} << 24;

  HyV3Config c;
  c.name = f.get_string("general.name").value_or("");
  // block_count includes the trailing multi-token-prediction blocks, which the main pass does not run.
  const int n_blocks = static_cast<int>(require_int_in(f, key(keys::block_count), 1, 4096));
  c.n_nextn = static_cast<int>(f.get_int(key(keys::nextn_predict_layers)).value_or(0));
  if (c.n_nextn < 0 || c.n_nextn >= n_blocks)
    fail("{}: hy_v3.nextn_predict_layers {} leaves no layer of the {} blocks to run", f.path(), c.n_nextn,
         n_blocks);
  c.n_layer = n_blocks - c.n_nextn;
  c.n_embd = static_cast<int>(require_int_in(f, key(keys::embedding_length), 1, kBig));
  c.n_ctx_train = static_cast<int>(f.get_int(key(keys::context_length)).value_or(0));

  const AttentionHeads heads = read_attention_heads(f, std::string(kHyV3Arch), n_blocks, c.n_embd, 4096);
  c.n_head = heads.n_head;
  c.n_head_kv = heads.n_head_kv;
  c.head_dim = heads.head_dim;

  c.rope_theta = static_cast<float>(f.get_float(key(keys::rope_freq_base)).value_or(10000.0));
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    fail("{}: hy_v3.rope.freq_base {} must be positive", f.path(), c.rope_theta);
  if (auto type = f.get_string(key(keys::rope_scaling_type)); type && *type != "none") {
    if (*type != "linear")
      fail("{}: hy_v3: rope scaling '{}' is not supported (none, linear)", f.path(), *type);
    const double factor = f.get_float(key(keys::rope_scaling_factor)).value_or(1.0);
    if (!(factor > 0)) fail("{}: hy_v3.rope.scaling.factor {} must be positive", f.path(), factor);
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  }
  c.eps = static_cast<float>(f.require_float(key(keys::rms_epsilon)));
  if (!(c.eps > 0) || !std::isfinite(c.eps))
    fail("{}: hy_v3.attention.layer_norm_rms_epsilon {} must be positive", f.path(), c.eps);

  // llama.cpp makes a layer dense exactly when it has no router.
  int n_moe = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    const bool moe = f.find_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", il)) != nullptr;
    c.moe.push_back(moe);
    n_moe += moe ? 1 : 0;
  }
  if (n_moe < c.n_layer) {  // llama.cpp sizes every dense layer with the first layer's feed_forward_length
    c.n_ff = per_layer_ints(f, key(keys::feed_forward_length), n_blocks)[0];
    if (c.n_ff < 1 || c.n_ff > kBig)
      fail("{}: hy_v3.feed_forward_length {} is out of range for the dense layers (1..{})", f.path(), c.n_ff,
           kBig);
  }
  if (n_moe > 0) {
    c.n_expert = static_cast<int>(require_int_in(f, key(keys::expert_count), 1, 4096));
    c.n_expert_used = static_cast<int>(require_int_in(f, key(keys::expert_used_count), 1, c.n_expert));
    // Required by llama.cpp (a scalar or one value per block; the first is used).
    c.n_ff_exp = static_cast<int>(per_layer_ints(f, key(keys::expert_feed_forward_length), n_blocks)[0]);
    if (c.n_ff_exp < 1 || c.n_ff_exp > kBig)
      fail("{}: hy_v3.expert_feed_forward_length {} is out of range (1..{})", f.path(), c.n_ff_exp, kBig);
    c.n_ff_shexp = f.get_int(key(keys::expert_shared_feed_forward_length)).value_or(0);
    if (c.n_ff_shexp == 0) c.n_ff_shexp = c.n_ff_exp;
    if (c.n_ff_shexp < 1 || c.n_ff_shexp > kBig)
      fail("{}: hy_v3.expert_shared_feed_forward_length {} is out of range (1..{})", f.path(), c.n_ff_shexp,
           kBig);
    const int64_t gating = f.get_int(key(keys::expert_gating_func)).value_or(0);
    if (gating == 0 || gating == kHyV3SigmoidGating)
      c.gating = backend::Gating::Sigmoid;
    else if (gating == kHyV3SoftmaxGating)
      c.gating = backend::Gating::Softmax;
    else
      fail("{}: hy_v3.expert_gating_func {} is not supported (1 softmax, 2 sigmoid; 0 or absent: sigmoid)",
           f.path(), gating);
    c.weights_norm = f.get_bool(key(keys::expert_weights_norm)).value_or(false);
    c.expert_weights_scale = static_cast<float>(f.get_float(key(keys::expert_weights_scale)).value_or(0.0));
    if (!std::isfinite(c.expert_weights_scale))
      fail("{}: hy_v3.expert_weights_scale is not finite", f.path());
  }

  c.n_vocab = vocab_from_token_embd(f, std::string(kHyV3Arch), c.n_embd);
  return c;
}

}  // namespace df::models

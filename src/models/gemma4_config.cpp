// gemma4 hyper-parameters from the GGUF keys (ARCHITECTURES.md 4.1), read as llama.cpp's load_hparams and
// llama_model_gemma4::load_arch_hparams read them (per-layer head sizes, KV heads, rotary dims and RoPE bases
// from the sliding-window pattern), with their load-time checks turned into df::Error messages.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "gguf/gguf.h"
#include "models/gemma4.h"
#include "models/gemma4_tensors.h"
#include "models/gguf_keys.h"
#include "models/moe_config.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {
namespace {

// <arch>.attention.sliding_window_pattern: one bool per layer (true = sliding), or one value for all.
std::vector<bool> sliding_pattern(const gguf::File& f, const std::string& key, int n_layer) {
  const gguf::Value& v = f.require(key);
  std::vector<bool> out;
  if (!v.is_array()) return std::vector<bool>(static_cast<size_t>(n_layer), v.as_bool(key));
  if (v.arr.size() != static_cast<size_t>(n_layer))
    fail("{}: GGUF key '{}' has {} entries, expected one per layer ({})", f.path(), key, v.arr.size(),
         n_layer);
  for (const auto& e : v.arr)
    out.push_back(e.type == gguf::ValueType::BOOL ? e.as_bool(key) : e.as_int(key) != 0);
  return out;
}

}  // namespace

int Gemma4Config::max_head_dim() const { return *std::max_element(head_dim.begin(), head_dim.end()); }

int64_t Gemma4Config::max_q_dim() const { return int64_t{n_head} * max_head_dim(); }

int64_t Gemma4Config::max_kv_dim() const {
  int64_t widest = 0;
  for (size_t l = 0; l < head_dim.size(); ++l) widest = std::max(widest, int64_t{n_head_kv[l]} * head_dim[l]);
  return widest;
}

Gemma4Config gemma4_config(const gguf::File& f) {
  const std::string arch = f.architecture();
  if (arch != kGemma4Arch) fail("{}: expected a gemma4 GGUF, general.architecture is '{}'", f.path(), arch);
  const auto key = [](std::string_view k) { return keys::of(kGemma4Arch, k); };
  constexpr int64_t kBig = int64_t{1} << 24;

  Gemma4Config c;
  c.name = f.get_string("general.name").value_or("");
  c.n_layer = static_cast<int>(require_int_in(f, key(keys::block_count), 1, 4096));
  c.n_embd = static_cast<int>(require_int_in(f, key(keys::embedding_length), 1, kBig));
  c.n_ctx_train = static_cast<int>(f.get_int(key(keys::context_length)).value_or(0));
  const auto L = static_cast<size_t>(c.n_layer);

  // What the 26B-A4B does not use and this engine does not implement: refused, not silently wrong.
  if (const int64_t per_layer = f.require_int(key(keys::embedding_length_per_layer)); per_layer != 0)
    fail(
        "{}: gemma4.embedding_length_per_layer_input is {}: per-layer embeddings (Gemma 4 E2B/E4B) are not "
        "supported",
        f.path(), per_layer);
  if (const int64_t shared = f.get_int(key(keys::shared_kv_layers)).value_or(0); shared != 0)
    fail(
        "{}: gemma4.attention.shared_kv_layers is {}: layers that reuse another layer's KV cache are not "
        "supported",
        f.path(), shared);

  c.n_head = uniform_per_layer(f, key(keys::head_count), c.n_layer);
  const auto kv = f.has(key(keys::head_count_kv)) ? per_layer_ints(f, key(keys::head_count_kv), c.n_layer)
                                                  : std::vector<int64_t>(L, c.n_head);
  c.swa = sliding_pattern(f, key(keys::sliding_window_pattern), c.n_layer);
  c.n_swa = static_cast<int>(require_int_in(f, key(keys::sliding_window), 1, kBig));

  // Head sizes and rotary dims: llama.cpp's defaults (key_length: n_embd / n_head; the sliding ones: the
  // global ones; rope dims: the global head size, the sliding ones: the global rope dims).
  const int64_t hd_full = f.get_int(key(keys::key_length)).value_or(c.n_embd / c.n_head);
  const int64_t hdv_full = f.get_int(key(keys::value_length)).value_or(c.n_embd / c.n_head);
  const int64_t hd_swa = f.get_int(key(keys::key_length_swa)).value_or(hd_full);
  const int64_t hdv_swa = f.get_int(key(keys::value_length_swa)).value_or(hdv_full);
  if (hd_full != hdv_full)
    fail("{}: gemma4 requires key_length == value_length ({} vs {})", f.path(), hd_full, hdv_full);
  if (hd_swa != hdv_swa)
    fail("{}: gemma4 requires key_length_swa == value_length_swa ({} vs {})", f.path(), hd_swa, hdv_swa);
  const int64_t rot_full = f.get_int(key(keys::rope_dimension_count)).value_or(hd_full);
  const int64_t rot_swa = f.get_int(key(keys::rope_dimension_count_swa)).value_or(rot_full);
  for (size_t l = 0; l < L; ++l) {
    const int64_t hd = c.swa[l] ? hd_swa : hd_full, rot = c.swa[l] ? rot_swa : rot_full;
    if (hd <= 0 || hd > 1024 || hd % 2 != 0)
      fail("{}: gemma4: layer {} has head size {}: it must be even and in 2..1024", f.path(), l, hd);
    if (rot <= 0 || rot > hd || rot % 2 != 0)
      fail(
          "{}: gemma4: layer {} rotates {} dims of a {}-wide head: it must be even and at most the head size",
          f.path(), l, rot, hd);
    if (kv[l] <= 0 || c.n_head % kv[l] != 0)
      fail("{}: gemma4: layer {}: {} query heads cannot be grouped over {} KV heads", f.path(), l, c.n_head,
           kv[l]);
    c.head_dim.push_back(static_cast<int>(hd));
    c.n_rot.push_back(static_cast<int>(rot));
    c.n_head_kv.push_back(static_cast<int>(kv[l]));
  }

  c.rope_theta = static_cast<float>(f.get_float(key(keys::rope_freq_base)).value_or(10000.0));
  c.rope_theta_swa = static_cast<float>(f.get_float(key(keys::rope_freq_base_swa)).value_or(10000.0));
  for (float theta : {c.rope_theta, c.rope_theta_swa})
    if (!(theta > 0) || !std::isfinite(theta))
      fail("{}: gemma4: RoPE base {} must be positive", f.path(), theta);
  if (auto type = f.get_string(key(keys::rope_scaling_type)); type && *type != "none") {
    if (*type != "linear")
      fail("{}: gemma4: rope scaling '{}' is not supported (none, linear)", f.path(), *type);
    const double factor = f.get_float(key(keys::rope_scaling_factor)).value_or(1.0);
    if (!(factor > 0)) fail("{}: gemma4.rope.scaling.factor {} must be positive", f.path(), factor);
    c.rope_freq_scale = static_cast<float>(1.0 / factor);  // global layers only (the sliding ones keep 1)
  }
  c.eps = static_cast<float>(f.require_float(key(keys::rms_epsilon)));
  if (!(c.eps > 0) || !std::isfinite(c.eps))
    fail("{}: gemma4.attention.layer_norm_rms_epsilon {} must be positive", f.path(), c.eps);
  // llama.cpp's default when the key is absent is 30 (llama_hparams::f_final_logit_softcapping); 0 turns it
  // off.
  c.final_logit_softcap = static_cast<float>(f.get_float(key(keys::final_logit_softcapping)).value_or(30.0));
  if (!(c.final_logit_softcap >= 0) || !std::isfinite(c.final_logit_softcap))
    fail("{}: gemma4.final_logit_softcapping {} must be >= 0", f.path(), c.final_logit_softcap);

  c.n_ff = per_layer_ints(f, key(keys::feed_forward_length), c.n_layer);
  for (size_t l = 0; l < L; ++l)
    if (c.n_ff[l] < 1 || c.n_ff[l] > kBig)
      fail("{}: gemma4.feed_forward_length of layer {} is {}, out of range (1..{})", f.path(), l, c.n_ff[l],
           kBig);

  // llama.cpp gives a layer experts exactly when it has a router.
  int n_moe = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    const bool moe = f.find_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", il)) != nullptr;
    c.moe.push_back(moe);
    n_moe += moe ? 1 : 0;
  }
  if (n_moe > 0) {
    c.n_expert = static_cast<int>(require_int_in(f, key(keys::expert_count), 1, 4096));
    c.n_expert_used = static_cast<int>(require_int_in(f, key(keys::expert_used_count), 1, c.n_expert));
    c.n_ff_exp = static_cast<int>(per_layer_ints(f, key(keys::expert_feed_forward_length), c.n_layer)[0]);
    if (c.n_ff_exp < 1 || c.n_ff_exp > kBig)
      fail("{}: gemma4.expert_feed_forward_length {} is out of range (1..{})", f.path(), c.n_ff_exp, kBig);
  }

  c.n_vocab = vocab_from_token_embd(f, std::string(kGemma4Arch), c.n_embd);
  return c;
}

}  // namespace df::models

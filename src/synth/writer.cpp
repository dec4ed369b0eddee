#include "synth/writer.h"

#include <fmt/format.h>

#include "models/gguf_keys.h"
#include "models/hy_v3_tensors.h"
#include "models/lfm2moe_tensors.h"
#include "util/error.h"

namespace df::synth {

using gguf::Value;
namespace keys = models::keys;

void write_vocab(gguf::Writer& w, const Vocab& v) {
  // Optional keys are written only where the real converters write them, so that files of the other
  // vocabularies keep their bytes.
  w.set("tokenizer.ggml.model", Value::of_string(v.model));
  if (!v.pre.empty()) w.set("tokenizer.ggml.pre", Value::of_string(v.pre));
  w.set("tokenizer.ggml.tokens", Value::of_strings(v.tokens));
  if (!v.scores.empty()) w.set("tokenizer.ggml.scores", Value::of_f32s(v.scores));
  w.set("tokenizer.ggml.token_type", Value::of_i32s(v.token_types));
  w.set("tokenizer.ggml.merges", Value::of_strings(v.merges));
  w.set("tokenizer.ggml.bos_token_id", Value::of_u32(v.bos_id));
  w.set("tokenizer.ggml.eos_token_id", Value::of_u32(v.eos_id));
  if (v.unk_id) w.set("tokenizer.ggml.unknown_token_id", Value::of_u32(*v.unk_id));
  w.set("tokenizer.ggml.padding_token_id", Value::of_u32(v.pad_id));
  if (v.add_space_prefix) w.set("tokenizer.ggml.add_space_prefix", Value::of_bool(*v.add_space_prefix));
  w.set("tokenizer.ggml.add_bos_token", Value::of_bool(v.add_bos));
  if (v.has_add_eos) w.set("tokenizer.ggml.add_eos_token", Value::of_bool(false));
  w.set("tokenizer.chat_template", Value::of_string(v.chat_template));
}

gguf::Writer make_writer(const Config& c, const Vocab& v, const std::vector<TensorRecipe>& tensors) {
  const Shape& s = c.shape;
  const std::string a(arch_name(c.arch));
  const auto key = [&](std::string_view k) { return keys::of(a, k); };
  const auto u32 = [](int64_t x) { return Value::of_u32(static_cast<uint32_t>(x)); };

  gguf::Writer w;
  w.set("general.architecture", Value::of_string(a));
  w.set("general.type", Value::of_string("model"));
  w.set("general.name", Value::of_string(c.name));
  w.set("general.description",
        Value::of_string(
            fmt::format("synthetic random-weight model (diskformer make-model, seed {}); not a trained "
                        "model",
                        c.seed)));
  w.set("general.quantization_version", u32(2));
  w.set("general.file_type", u32(file_type_of(c.types.matmul)));
  w.set(key(keys::block_count), u32(s.n_layer));
  w.set(key(keys::context_length), u32(s.n_ctx_train));
  w.set(key(keys::embedding_length), u32(s.n_embd));
  w.set(key(keys::feed_forward_length), u32(s.n_ff));
  w.set(key(keys::head_count), u32(s.n_head));
  w.set(key(keys::rope_freq_base), Value::of_f32(s.rope_theta));
  w.set(key(keys::rms_epsilon), Value::of_f32(s.rms_eps));
  w.set(key(keys::expert_count), u32(s.n_expert));
  w.set(key(keys::expert_used_count), u32(s.n_expert_used));
  w.set(key(keys::expert_feed_forward_length), u32(s.n_ff_exp));

  write_vocab(w, v);

  if (c.arch == Arch::lfm2moe) {
    // Per-layer KV heads: 0 marks a short-conv layer.
    std::vector<int32_t> kv(static_cast<size_t>(s.n_layer), 0);
    for (int il = 0; il < s.n_layer; ++il)
      if (c.is_attention_layer(il)) kv[size_t(il)] = s.n_head_kv;
    w.set(key(keys::head_count_kv), Value::of_i32s(kv));
    w.set(key(keys::leading_dense_block_count), u32(s.n_dense_lead));
    w.set(key(keys::expert_gating_func), u32(models::kLfm2MoeSigmoidGating));
    w.set(key(keys::vocab_size), u32(s.n_vocab));
    w.set(key(keys::shortconv_l_cache), u32(s.conv_l_cache));
  } else {
    w.set(key(keys::head_count_kv), u32(s.n_head_kv));
    w.set(key(keys::key_length), u32(s.head_dim));
    w.set(key(keys::value_length), u32(s.head_dim));
  }
  if (c.arch == Arch::hy_v3) {  // what llama.cpp's HYV3Model conversion writes
    w.set(key(keys::expert_shared_feed_forward_length), u32(s.n_ff_shexp));
    w.set(key(keys::expert_shared_count), u32(1));
    w.set(key(keys::expert_weights_norm), Value::of_bool(true));
    if (s.expert_weights_scale > 0)
      w.set(key(keys::expert_weights_scale), Value::of_f32(s.expert_weights_scale));
    w.set(key(keys::expert_gating_func), u32(models::kHyV3SigmoidGating));
  }
  if (c.arch == Arch::qwen35moe) {  // what llama.cpp's Qwen3_5MoeTextModel conversion writes
    w.set(key(keys::rope_dimension_count), u32(s.n_rot));
    w.set(key(keys::rope_dimension_sections), Value::of_i32s(s.rope_sections));
    w.set(key(keys::expert_shared_feed_forward_length), u32(s.n_ff_shexp));
    w.set(key(keys::ssm_conv_kernel), u32(s.ssm_conv_kernel));
    w.set(key(keys::ssm_state_size), u32(s.dn_head_dim));
    w.set(key(keys::ssm_group_count), u32(s.dn_k_heads));
    w.set(key(keys::ssm_time_step_rank), u32(s.dn_v_heads));
    w.set(key(keys::ssm_inner_size), u32(int64_t{s.dn_v_heads} * s.dn_head_dim));
    w.set(key(keys::full_attention_interval), u32(s.full_attn_interval));
  }
  if (c.arch == Arch::gemma4) {  // what llama.cpp's Gemma4Model conversion writes
    std::vector<int32_t> kv;
    std::vector<Value> sliding;
    for (int il = 0; il < s.n_layer; ++il) {
      const bool global = c.is_global_layer(il);
      kv.push_back(global ? s.n_head_kv_global : s.n_head_kv);
      sliding.push_back(Value::of_bool(!global));
    }
    w.set(key(keys::head_count_kv), Value::of_i32s(kv));
    w.set(key(keys::key_length), u32(s.head_dim_global));
    w.set(key(keys::value_length), u32(s.head_dim_global));
    w.set(key(keys::key_length_swa), u32(s.head_dim));
    w.set(key(keys::value_length_swa), u32(s.head_dim));
    w.set(key(keys::rope_dimension_count), u32(s.head_dim_global));
    w.set(key(keys::rope_dimension_count_swa), u32(s.head_dim));
    w.set(key(keys::rope_freq_base), Value::of_f32(s.rope_theta_global));
    w.set(key(keys::rope_freq_base_swa), Value::of_f32(s.rope_theta));
    w.set(key(keys::sliding_window), u32(s.n_swa));
    w.set(key(keys::sliding_window_pattern), Value::of_array(gguf::ValueType::BOOL, std::move(sliding)));
    w.set(key(keys::embedding_length_per_layer), u32(0));
    // Always written: llama.cpp reads an absent key as 30, so 0 (no capping) must be said.
    w.set(key(keys::final_logit_softcapping), Value::of_f32(s.logit_softcap));
  }
  for (const auto& t : tensors) w.add_tensor(t.spec);
  return w;
}

WriteSummary write_model(const Config& c, const std::string& path, const WriteOptions& opt) {
  validate(c);
  const Vocab vocab = build_vocab(c.arch, c.shape.n_vocab);
  const std::vector<TensorRecipe> tensors = plan_tensors(c);
  const gguf::Writer writer = make_writer(c, vocab, tensors);

  WriteSummary summary;
  summary.n_tensors = tensors.size();
  for (const auto& t : tensors) summary.tensor_bytes += t.spec.nbytes();
  uint64_t done = 0;
  if (opt.progress) opt.progress(0, summary.tensor_bytes);
  writer.write(path, [&](size_t i, std::span<uint8_t> out) {
    generate_tensor(tensors[i], c.seed, out, opt.threads);
    done += out.size();
    if (opt.progress) opt.progress(done, summary.tensor_bytes);
  });
  return summary;
}

}  // namespace df::synth

#pragma once
// The suffixes of the `<arch>.*` GGUF keys (llama.cpp's LLM_KV names, the same for every architecture),
// spelled once for the configs that read them (*_config.cpp, moe_config.cpp) and make-model, which writes
// them.
#include <string>
#include <string_view>

namespace df::models::keys {

inline constexpr std::string_view block_count = "block_count";
inline constexpr std::string_view context_length = "context_length";
inline constexpr std::string_view embedding_length = "embedding_length";
inline constexpr std::string_view feed_forward_length = "feed_forward_length";
// vocab_size: written for llama.cpp; this engine takes n_vocab from token_embd's shape.
inline constexpr std::string_view vocab_size = "vocab_size";
inline constexpr std::string_view leading_dense_block_count = "leading_dense_block_count";

inline constexpr std::string_view expert_count = "expert_count";
inline constexpr std::string_view expert_used_count = "expert_used_count";
inline constexpr std::string_view expert_feed_forward_length = "expert_feed_forward_length";
inline constexpr std::string_view expert_gating_func = "expert_gating_func";
inline constexpr std::string_view expert_weights_scale = "expert_weights_scale";
inline constexpr std::string_view expert_weights_norm = "expert_weights_norm";
inline constexpr std::string_view expert_shared_feed_forward_length = "expert_shared_feed_forward_length";
inline constexpr std::string_view expert_shared_count = "expert_shared_count";
inline constexpr std::string_view nextn_predict_layers = "nextn_predict_layers";

inline constexpr std::string_view head_count = "attention.head_count";
inline constexpr std::string_view head_count_kv = "attention.head_count_kv";
inline constexpr std::string_view key_length = "attention.key_length";
inline constexpr std::string_view value_length = "attention.value_length";
inline constexpr std::string_view rms_epsilon = "attention.layer_norm_rms_epsilon";
inline constexpr std::string_view sliding_window = "attention.sliding_window";
inline constexpr std::string_view sliding_window_pattern = "attention.sliding_window_pattern";
inline constexpr std::string_view key_length_swa = "attention.key_length_swa";
inline constexpr std::string_view value_length_swa = "attention.value_length_swa";
inline constexpr std::string_view shared_kv_layers = "attention.shared_kv_layers";
inline constexpr std::string_view embedding_length_per_layer = "embedding_length_per_layer_input";
inline constexpr std::string_view final_logit_softcapping = "final_logit_softcapping";

inline constexpr std::string_view rope_dimension_count = "rope.dimension_count";
inline constexpr std::string_view rope_freq_base = "rope.freq_base";
inline constexpr std::string_view rope_freq_base_swa = "rope.freq_base_swa";
inline constexpr std::string_view rope_dimension_count_swa = "rope.dimension_count_swa";
inline constexpr std::string_view rope_scaling_type = "rope.scaling.type";
inline constexpr std::string_view rope_scaling_factor = "rope.scaling.factor";
inline constexpr std::string_view rope_scaling_attn_factor = "rope.scaling.attn_factor";
inline constexpr std::string_view rope_scaling_orig_ctx = "rope.scaling.original_context_length";
inline constexpr std::string_view rope_yarn_beta_fast = "rope.scaling.yarn_beta_fast";
inline constexpr std::string_view rope_yarn_beta_slow = "rope.scaling.yarn_beta_slow";
inline constexpr std::string_view rope_yarn_log_multiplier = "rope.scaling.yarn_log_multiplier";

inline constexpr std::string_view shortconv_l_cache = "shortconv.l_cache";

inline constexpr std::string_view rope_dimension_sections = "rope.dimension_sections";
inline constexpr std::string_view attention_scale = "attention.scale";
inline constexpr std::string_view full_attention_interval = "full_attention_interval";
inline constexpr std::string_view recurrent_layers = "attention.recurrent_layers";
inline constexpr std::string_view ssm_conv_kernel = "ssm.conv_kernel";
inline constexpr std::string_view ssm_inner_size = "ssm.inner_size";
inline constexpr std::string_view ssm_state_size = "ssm.state_size";
inline constexpr std::string_view ssm_time_step_rank = "ssm.time_step_rank";
inline constexpr std::string_view ssm_group_count = "ssm.group_count";

// `<arch>.<suffix>`, the key as stored.
inline std::string of(std::string_view arch, std::string_view suffix) {
  std::string k(arch);
  k += '.';
  k += suffix;
  return k;
}

}  // namespace df::models::keys

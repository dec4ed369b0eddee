#pragma once
// What `diskformer make-model` builds: the shape, block types and numerics knobs of a synthetic random-weight
// MoE model with the real tensor names of its architecture. Presets give the golden fixtures' shapes, a
// benchmark-sized model and the real flagship hyper-parameters; every field can be overridden and validate()
// explains, by flag name, what is wrong with a combination.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_types.h"

namespace df::synth {

enum class Arch { lfm2moe, qwen3moe, hy_v3, gemma4, qwen35moe };
std::string_view arch_name(Arch a);
Arch arch_from_name(std::string_view name);  // throws df::Error naming the accepted values

struct Shape {
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;  // lfm2moe: always n_embd / n_head
  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff_exp = 0;
  int n_ff =
      0;  // lfm2moe: dense FFN of the leading layers; qwen3moe: feed_forward_length (unused by the graph)
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rope_theta = 0;
  float rms_eps = 0;
  int n_dense_lead = 0;            // lfm2moe, hy_v3: leading dense-FFN layers
  std::vector<int> attn_layers;    // lfm2moe only: the attention layers, the others are short-conv layers
  int conv_l_cache = 3;            // lfm2moe only
  int n_ff_shexp = 0;              // hy_v3 only: the shared expert's width
  float expert_weights_scale = 0;  // hy_v3 only: expert_weights_scale (0: not written)
  // gemma4 only: the global (full-attention) layers, the others slide over n_swa positions; the global
  // layers' head size and KV heads (head_dim / n_head_kv are the sliding layers'), RoPE base, and the share
  // of their dims that rotate (the rest get rope_freqs divisors of 1e30, as the converter writes them).
  std::vector<int> global_layers;
  int n_swa = 0;
  int head_dim_global = 0, n_head_kv_global = 0;
  float rope_theta_global = 0;
  float partial_rotary_global = 1;
  float logit_softcap = 0;
  // qwen35moe only: every full_attn_interval-th layer attends (the others are gated delta-net layers), with
  // n_rot rotated dims of each head and the IMRoPE sections (rope.dimension_sections); the delta-net layers
  // have dn_k_heads query/key heads, dn_v_heads value heads, dn_head_dim values per head and a causal conv
  // of ssm_conv_kernel taps.
  int full_attn_interval = 4;
  int n_rot = 0;
  std::vector<int> rope_sections;
  int dn_k_heads = 0, dn_v_heads = 0, dn_head_dim = 0;
  int ssm_conv_kernel = 4;
};

struct Types {
  GgmlType matmul = GgmlType::Q4_0;      // attention / conv / dense FFN projections
  GgmlType experts = GgmlType::Q4_0;     // ffn_{gate,up,down}_exps
  GgmlType token_embd = GgmlType::Q6_K;  // lfm2moe: also the (tied) output head
  GgmlType output = GgmlType::Q6_K;      // qwen3moe, hy_v3: the untied output head
};

// Knobs of the weight distributions (the golden JSON's `numerics`). See synth/weights.h for how they are
// used.
struct Numerics {
  float embd_std = 0.25f;   // std of the token embedding entries
  float logit_std = 12.0f;  // target std of the logits over the vocabulary
  float block_gain = 1.0f;  // RMS of what each block (mixer, FFN) adds to the residual stream
  float router_std = 1.5f;  // target std of the router logits
  float bias_std = 0.02f;   // std of the lfm2moe expert selection bias
  int route_dims = 16;  // the last route_dims hidden dims carry only the token embedding; routers read them
};

struct Config {
  Arch arch = Arch::lfm2moe;
  std::string name;
  Shape shape;
  Types types;
  Numerics numerics;
  uint64_t seed = 1;

  // lfm2moe: listed in attn_layers; qwen35moe: every full_attn_interval-th; the others: always
  bool is_attention_layer(int il) const;
  bool is_global_layer(int il) const;  // gemma4: listed in global_layers
  bool is_moe_layer(int il) const;     // qwen3moe: always; the others: il >= n_dense_lead
  int n_moe_layers() const;
};

// Preset names: "tiny", "small" for every architecture; "lfm2-24b" (lfm2moe) and "qwen3-30b" (qwen3moe) with
// the flagship hyper-parameters, "hy-v3-30b" (hy_v3) with the shape llama.cpp calls 30B-A3B. Throws df::Error
// for an unknown name or one that does not fit the architecture.
Config preset(Arch arch, std::string_view name);
std::vector<std::string> preset_names(Arch arch);

// Throws df::Error naming the offending flag and value: divisibility by block sizes and heads, ranges,
// attention layer indices, route dims, vocabulary size.
void validate(const Config& c);

// The general.file_type value llama.cpp uses for a file whose matmuls have this type.
uint32_t file_type_of(GgmlType matmul);

}  // namespace df::synth

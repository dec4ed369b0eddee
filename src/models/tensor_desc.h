#pragma once
// One tensor an architecture binds, as its description lists it (lfm2moe_tensors.h, qwen3moe_tensors.h,
// gpt_oss_tensors.h). The loader checks and loads exactly the listed tensors and `diskformer make-model`
// (src/synth/) writes exactly them, so names and shapes are spelled once and the two cannot drift apart.
#include <cstdint>
#include <string>
#include <vector>

namespace df::models {

// What a tensor is, whatever the architecture (llama.cpp's LLM_TENSOR_* of the architectures we run). The
// loader maps a kind to the field it fills; the generator maps it to a weight distribution.
enum class TensorKind : uint8_t {
  token_embd,
  output_norm,
  output,
  attn_norm,
  attn_q,
  attn_k,
  attn_v,
  attn_output,
  attn_q_norm,
  attn_k_norm,
  attn_q_bias,
  attn_k_bias,
  attn_v_bias,
  attn_output_bias,
  attn_sinks,
  post_attn_norm,
  conv,  // short-conv taps
  conv_in_proj,
  conv_out_proj,
  ffn_norm,
  ffn_gate,
  ffn_up,
  ffn_down,
  router,
  router_bias,
  selection_bias,  // added to the router's scores for the choice of experts only
  gate_exps,
  up_exps,
  down_exps,
  gate_up_exps,  // gate_exps and up_exps fused: each expert's gate rows, then its up rows
  gate_exps_bias,
  up_exps_bias,
  down_exps_bias,
  shared_gate,  // the always-on shared expert beside the routed ones (ffn_*_shexp)
  shared_up,
  shared_down,
  rope_freqs,       // θ divisors of the global attention layers (gemma4)
  ffn_post_norm,    // gemma4: the norm of a layer's FFN output (post_ffw_norm)
  ffn_post_norm_1,  // gemma4: the dense branch's output norm
  ffn_pre_norm_2,   // gemma4: the expert branch's input norm
  ffn_post_norm_2,  // gemma4: the expert branch's output norm
  router_scale,     // gemma4: the router input's per-channel scale (ffn_gate_inp.scale)
  down_exps_scale,  // a per-expert scale of the down projection's output (ffn_down_exps.scale)
  layer_out_scale,  // gemma4: a scalar multiplying the layer's output (layer_output_scale)
  // qwen35moe's gated delta-net layers (ARCHITECTURES.md 5.2)
  dn_qkv,           // attn_qkv: the q, k and v heads' input projection
  dn_gate,          // attn_gate: the output gate z
  dn_beta,          // ssm_beta: the update strength's projection
  dn_alpha,         // ssm_alpha: the decay's projection
  dn_dt_bias,       // ssm_dt.bias
  dn_a,             // ssm_a: -exp(A_log)
  dn_norm,          // ssm_norm: the output's per-head RMS norm weight
  dn_out,           // ssm_out: the output projection
  shared_gate_inp,  // ffn_gate_inp_shexp: the shared expert's sigmoid gate (one output)
};

// How the loader reads a tensor; the generator derives the stored type from it.
enum class TensorRole : uint8_t {
  table,   // token embeddings {n_embd, n_vocab}: rows looked up (and the tied head); any matmul type
  matmul,  // a dense projection {n_in, n_out}, loaded and repacked for the backend; any matmul type
  router,  // the expert router {n_embd, n_expert}: a matmul (F32 in synthetic models)
  vector,  // F32 only: norm weights, biases, short-conv taps
  expert,  // a routed-expert stack {n_in, n_out, n_expert}: checked here, loaded by the expert provider
};

struct TensorDesc {
  TensorKind kind;
  TensorRole role;
  int layer = -1;  // -1: outside the layers
  std::string name;
  std::vector<int64_t> ne;  // ggml order
  // An older name of the same tensor that the loader accepts when `name` is absent (generators write `name`).
  std::string alias;
  // May be absent: the loader then falls back (the untied head: token_embd), generators may leave it out.
  bool optional = false;
  // A tensor that stands in for this one when the file has it (the fused gate_up_exps for gate_exps and
  // up_exps, add_gate_up_exps): the loader then binds that one and requires this one absent; generators write
  // one or the other.
  std::string replaced_by;
  // A matrix whose rows come in alternating groups of this many (0: none): the loader binds the even groups
  // to the target's weight and the odd ones to its second weight (qwen35moe's attn_q: each head's query rows,
  // then its output gate's), each a matrix of its own, so that each product is a matmul of its own.
  int64_t row_group = 0;
};

// Whether a MoE layer's routing reads tensors of this kind in some architecture (the norm before the router,
// the router, its bias and scale, the choice's bias): what a stage of a layer split loads of the next
// stage's first MoE layers to guess their experts.
bool routes_experts(TensorKind kind);

// Appends a tensor outside the layers.
TensorDesc& add_tensor(std::vector<TensorDesc>& out, TensorKind kind, TensorRole role, std::string name,
                       std::vector<int64_t> ne);
// Appends a tensor of model layer `il` named blk.<il>.<suffix>.
TensorDesc& add_layer_tensor(std::vector<TensorDesc>& out, int il, TensorKind kind, TensorRole role,
                             const char* suffix, std::vector<int64_t> ne);
// Appends layer `il`'s routed gate and up experts as llama.cpp's create_tensor_gate_up_exps loads them: the
// fused blk.<il>.ffn_gate_up_exps.weight {n_embd, 2·n_ff, n_expert} when the file has it (optional), else the
// separate ffn_gate_exps and ffn_up_exps {n_embd, n_ff, n_expert} (replaced_by the fused one).
void add_gate_up_exps(std::vector<TensorDesc>& out, int il, int64_t n_embd, int64_t n_ff, int64_t n_expert);

}  // namespace df::models

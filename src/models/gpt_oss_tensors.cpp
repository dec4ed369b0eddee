#include "models/gpt_oss_tensors.h"

namespace df::models {

std::vector<TensorDesc> gpt_oss_tensors(const GptOssConfig& c) {
  using K = TensorKind;
  using R = TensorRole;
  const int64_t H = c.n_embd, hd = c.head_dim, V = c.n_vocab, E = c.n_expert, F = c.n_ff_exp;
  const int64_t q_dim = int64_t{c.n_head} * hd, kv_dim = int64_t{c.n_head_kv} * hd;
  std::vector<TensorDesc> t;
  add_tensor(t, K::token_embd, R::table, "token_embd.weight", {H, V});
  add_tensor(t, K::output_norm, R::vector, "output_norm.weight", {H});
  add_tensor(t, K::output, R::matmul, "output.weight", {H, V});  // never tied
  for (int il = 0; il < c.n_layer; ++il) {
    add_layer_tensor(t, il, K::attn_norm, R::vector, "attn_norm.weight", {H});
    add_layer_tensor(t, il, K::attn_q, R::matmul, "attn_q.weight", {H, q_dim});
    add_layer_tensor(t, il, K::attn_q_bias, R::vector, "attn_q.bias", {q_dim});
    add_layer_tensor(t, il, K::attn_k, R::matmul, "attn_k.weight", {H, kv_dim});
    add_layer_tensor(t, il, K::attn_k_bias, R::vector, "attn_k.bias", {kv_dim});
    add_layer_tensor(t, il, K::attn_v, R::matmul, "attn_v.weight", {H, kv_dim});
    add_layer_tensor(t, il, K::attn_v_bias, R::vector, "attn_v.bias", {kv_dim});
    add_layer_tensor(t, il, K::attn_output, R::matmul, "attn_output.weight", {q_dim, H});
    add_layer_tensor(t, il, K::attn_output_bias, R::vector, "attn_output.bias", {H});
    add_layer_tensor(t, il, K::attn_sinks, R::vector, "attn_sinks.weight", {c.n_head});
    add_layer_tensor(t, il, K::post_attn_norm, R::vector, "post_attention_norm.weight", {H});
    add_layer_tensor(t, il, K::router, R::router, "ffn_gate_inp.weight", {H, E});
    add_layer_tensor(t, il, K::router_bias, R::vector, "ffn_gate_inp.bias", {E});
    add_layer_tensor(t, il, K::gate_exps_bias, R::vector, "ffn_gate_exps.bias", {F, E});
    add_layer_tensor(t, il, K::up_exps_bias, R::vector, "ffn_up_exps.bias", {F, E});
    add_layer_tensor(t, il, K::down_exps_bias, R::vector, "ffn_down_exps.bias", {H, E});
    add_layer_tensor(t, il, K::gate_exps, R::expert, "ffn_gate_exps.weight", {H, F, E});
    add_layer_tensor(t, il, K::up_exps, R::expert, "ffn_up_exps.weight", {H, F, E});
    add_layer_tensor(t, il, K::down_exps, R::expert, "ffn_down_exps.weight", {F, H, E});
  }
  return t;
}

}  // namespace df::models

#include "models/qwen35moe_tensors.h"

namespace df::models {

std::vector<TensorDesc> qwen35moe_tensors(const Qwen35MoeConfig& c) {
  using K = TensorKind;
  using R = TensorRole;
  const int64_t H = c.n_embd, hd = c.head_dim, V = c.n_vocab;
  const int64_t q_dim = int64_t{c.n_head} * hd, kv_dim = int64_t{c.n_head_kv} * hd;
  const int64_t d = c.dn_head_dim, v_dim = int64_t{c.dn_v_heads} * d, C = c.conv_channels();
  std::vector<TensorDesc> t;
  add_tensor(t, K::token_embd, R::table, "token_embd.weight", {H, V});
  add_tensor(t, K::output_norm, R::vector, "output_norm.weight", {H});
  add_tensor(t, K::output, R::matmul, "output.weight", {H, V}).optional = true;  // else token_embd
  for (int il = 0; il < c.n_layer; ++il) {
    add_layer_tensor(t, il, K::attn_norm, R::vector, "attn_norm.weight", {H});
    add_layer_tensor(t, il, K::ffn_norm, R::vector, "post_attention_norm.weight", {H});
    if (!c.recurrent[static_cast<size_t>(il)]) {
      add_layer_tensor(t, il, K::attn_q, R::matmul, "attn_q.weight", {H, 2 * q_dim}).row_group = hd;
      add_layer_tensor(t, il, K::attn_k, R::matmul, "attn_k.weight", {H, kv_dim});
      add_layer_tensor(t, il, K::attn_v, R::matmul, "attn_v.weight", {H, kv_dim});
      add_layer_tensor(t, il, K::attn_output, R::matmul, "attn_output.weight", {q_dim, H});
      add_layer_tensor(t, il, K::attn_q_norm, R::vector, "attn_q_norm.weight", {hd});
      add_layer_tensor(t, il, K::attn_k_norm, R::vector, "attn_k_norm.weight", {hd});
    } else {
      add_layer_tensor(t, il, K::dn_qkv, R::matmul, "attn_qkv.weight", {H, C});
      add_layer_tensor(t, il, K::dn_gate, R::matmul, "attn_gate.weight", {H, v_dim});
      add_layer_tensor(t, il, K::conv, R::vector, "ssm_conv1d.weight", {c.conv_taps, C});
      add_layer_tensor(t, il, K::dn_dt_bias, R::vector, "ssm_dt.bias", {c.dn_v_heads});
      add_layer_tensor(t, il, K::dn_a, R::vector, "ssm_a", {c.dn_v_heads});
      add_layer_tensor(t, il, K::dn_beta, R::matmul, "ssm_beta.weight", {H, c.dn_v_heads});
      add_layer_tensor(t, il, K::dn_alpha, R::matmul, "ssm_alpha.weight", {H, c.dn_v_heads});
      add_layer_tensor(t, il, K::dn_norm, R::vector, "ssm_norm.weight", {d});
      add_layer_tensor(t, il, K::dn_out, R::matmul, "ssm_out.weight", {v_dim, H});
    }
    const int64_t E = c.n_expert, F = c.n_ff_exp, S = c.n_ff_shexp;
    add_layer_tensor(t, il, K::router, R::router, "ffn_gate_inp.weight", {H, E});
    add_layer_tensor(t, il, K::down_exps, R::expert, "ffn_down_exps.weight", {F, H, E});
    add_gate_up_exps(t, il, H, F, E);
    // A one-output matrix, stored 1-D ({H}), as the router F32.
    add_layer_tensor(t, il, K::shared_gate_inp, R::router, "ffn_gate_inp_shexp.weight", {H});
    add_layer_tensor(t, il, K::shared_gate, R::matmul, "ffn_gate_shexp.weight", {H, S});
    add_layer_tensor(t, il, K::shared_up, R::matmul, "ffn_up_shexp.weight", {H, S});
    add_layer_tensor(t, il, K::shared_down, R::matmul, "ffn_down_shexp.weight", {S, H});
  }
  return t;
}

}  // namespace df::models

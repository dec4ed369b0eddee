#include "models/hy_v3_tensors.h"

namespace df::models {

std::vector<TensorDesc> hy_v3_tensors(const HyV3Config& c) {
  using K = TensorKind;
  using R = TensorRole;
  const int64_t H = c.n_embd, hd = c.head_dim, V = c.n_vocab;
  const int64_t q_dim = int64_t{c.n_head} * hd, kv_dim = int64_t{c.n_head_kv} * hd;
  std::vector<TensorDesc> t;
  add_tensor(t, K::token_embd, R::table, "token_embd.weight", {H, V});
  add_tensor(t, K::output_norm, R::vector, "output_norm.weight", {H});
  add_tensor(t, K::output, R::matmul, "output.weight", {H, V}).optional = true;  // else token_embd
  for (int il = 0; il < c.n_layer; ++il) {
    add_layer_tensor(t, il, K::attn_norm, R::vector, "attn_norm.weight", {H});
    add_layer_tensor(t, il, K::attn_q, R::matmul, "attn_q.weight", {H, q_dim});
    add_layer_tensor(t, il, K::attn_k, R::matmul, "attn_k.weight", {H, kv_dim});
    add_layer_tensor(t, il, K::attn_v, R::matmul, "attn_v.weight", {H, kv_dim});
    add_layer_tensor(t, il, K::attn_output, R::matmul, "attn_output.weight", {q_dim, H});
    add_layer_tensor(t, il, K::attn_q_norm, R::vector, "attn_q_norm.weight", {hd});
    add_layer_tensor(t, il, K::attn_k_norm, R::vector, "attn_k_norm.weight", {hd});
    add_layer_tensor(t, il, K::ffn_norm, R::vector, "ffn_norm.weight", {H});
    if (!c.moe[static_cast<size_t>(il)]) {
      add_layer_tensor(t, il, K::ffn_gate, R::matmul, "ffn_gate.weight", {H, c.n_ff});
      add_layer_tensor(t, il, K::ffn_down, R::matmul, "ffn_down.weight", {c.n_ff, H});
      add_layer_tensor(t, il, K::ffn_up, R::matmul, "ffn_up.weight", {H, c.n_ff});
      continue;
    }
    const int64_t E = c.n_expert, F = c.n_ff_exp, S = c.n_ff_shexp;
    add_layer_tensor(t, il, K::router, R::router, "ffn_gate_inp.weight", {H, E});
    add_layer_tensor(t, il, K::selection_bias, R::vector, "exp_probs_b", {E}).optional = true;
    add_layer_tensor(t, il, K::down_exps, R::expert, "ffn_down_exps.weight", {F, H, E});
    add_gate_up_exps(t, il, H, F, E);  // llama.cpp's hy_v3 loader takes them fused too
    add_layer_tensor(t, il, K::shared_gate, R::matmul, "ffn_gate_shexp.weight", {H, S});
    add_layer_tensor(t, il, K::shared_up, R::matmul, "ffn_up_shexp.weight", {H, S});
    add_layer_tensor(t, il, K::shared_down, R::matmul, "ffn_down_shexp.weight", {S, H});
  }
  return t;
}

}  // namespace df::models

#include "models/gemma4_tensors.h"

#include <algorithm>

namespace df::models {

std::vector<TensorDesc> gemma4_tensors(const Gemma4Config& c) {
  using K = TensorKind;
  using R = TensorRole;
  const int64_t H = c.n_embd, V = c.n_vocab, E = c.n_expert, F = c.n_ff_exp;
  std::vector<TensorDesc> t;
  add_tensor(t, K::output, R::matmul, "output.weight", {H, V}).optional = true;  // else tied
  add_tensor(t, K::token_embd, R::table, "token_embd.weight", {H, V});
  add_tensor(t, K::output_norm, R::vector, "output_norm.weight", {H});
  for (int il = 0; il < c.n_layer; ++il)
    if (!c.swa[static_cast<size_t>(il)]) {  // one tensor for every global layer (llama.cpp duplicates it)
      add_tensor(t, K::rope_freqs, R::vector, "rope_freqs.weight", {c.n_rot[static_cast<size_t>(il)] / 2});
      break;
    }
  for (int il = 0; il < c.n_layer; ++il) {
    const size_t l = static_cast<size_t>(il);
    const int64_t hd = c.head_dim[l], q_dim = int64_t{c.n_head} * hd, kv_dim = int64_t{c.n_head_kv[l]} * hd;
    add_layer_tensor(t, il, K::attn_norm, R::vector, "attn_norm.weight", {H});
    add_layer_tensor(t, il, K::attn_q, R::matmul, "attn_q.weight", {H, q_dim});
    add_layer_tensor(t, il, K::attn_k, R::matmul, "attn_k.weight", {H, kv_dim});
    add_layer_tensor(t, il, K::attn_v, R::matmul, "attn_v.weight", {H, kv_dim}).optional = true;
    add_layer_tensor(t, il, K::attn_output, R::matmul, "attn_output.weight", {q_dim, H});
    add_layer_tensor(t, il, K::attn_q_norm, R::vector, "attn_q_norm.weight", {hd});
    add_layer_tensor(t, il, K::attn_k_norm, R::vector, "attn_k_norm.weight", {hd});
    add_layer_tensor(t, il, K::post_attn_norm, R::vector, "post_attention_norm.weight", {H});
    add_layer_tensor(t, il, K::layer_out_scale, R::vector, "layer_output_scale.weight", {1}).optional = true;
    add_layer_tensor(t, il, K::ffn_norm, R::vector, "ffn_norm.weight", {H});
    add_layer_tensor(t, il, K::ffn_gate, R::matmul, "ffn_gate.weight", {H, c.n_ff[l]});
    add_layer_tensor(t, il, K::ffn_up, R::matmul, "ffn_up.weight", {H, c.n_ff[l]});
    add_layer_tensor(t, il, K::ffn_down, R::matmul, "ffn_down.weight", {c.n_ff[l], H});
    add_layer_tensor(t, il, K::ffn_post_norm, R::vector, "post_ffw_norm.weight", {H});
    if (!c.moe[l]) continue;
    add_layer_tensor(t, il, K::router, R::router, "ffn_gate_inp.weight", {H, E});
    add_layer_tensor(t, il, K::router_scale, R::vector, "ffn_gate_inp.scale", {H});
    add_layer_tensor(t, il, K::ffn_pre_norm_2, R::vector, "pre_ffw_norm_2.weight", {H});
    add_layer_tensor(t, il, K::ffn_post_norm_1, R::vector, "post_ffw_norm_1.weight", {H});
    add_layer_tensor(t, il, K::ffn_post_norm_2, R::vector, "post_ffw_norm_2.weight", {H});
    add_gate_up_exps(t, il, H, F, E);  // fused (as the converter writes them) or separate
    add_layer_tensor(t, il, K::down_exps, R::expert, "ffn_down_exps.weight", {F, H, E});
    add_layer_tensor(t, il, K::down_exps_scale, R::vector, "ffn_down_exps.scale", {E}).optional = true;
  }
  return t;
}

}  // namespace df::models

#include "models/lfm2moe_tensors.h"

#include <fmt/format.h>

namespace df::models {

std::vector<TensorDesc> lfm2moe_tensors(const Lfm2MoeConfig& c) {
  using K = TensorKind;
  using R = TensorRole;
  const int64_t H = c.n_embd, hd = c.head_dim, V = c.n_vocab;
  const int64_t q_dim = int64_t{c.n_head} * hd, kv_dim = int64_t{c.n_head_kv} * hd;
  std::vector<TensorDesc> t;
  add_tensor(t, K::token_embd, R::table, "token_embd.weight", {H, V});
  add_tensor(t, K::output_norm, R::vector, "token_embd_norm.weight", {H}).alias = "output_norm.weight";
  add_tensor(t, K::output, R::matmul, "output.weight", {H, V}).optional = true;  // else tied
  for (int il = 0; il < c.n_layer; ++il) {
    add_layer_tensor(t, il, K::attn_norm, R::vector, "attn_norm.weight", {H});
    if (c.attn[static_cast<size_t>(il)]) {
      add_layer_tensor(t, il, K::attn_q, R::matmul, "attn_q.weight", {H, q_dim});
      add_layer_tensor(t, il, K::attn_k, R::matmul, "attn_k.weight", {H, kv_dim});
      add_layer_tensor(t, il, K::attn_v, R::matmul, "attn_v.weight", {H, kv_dim});
      add_layer_tensor(t, il, K::attn_output, R::matmul, "attn_output.weight", {q_dim, H});
      add_layer_tensor(t, il, K::attn_q_norm, R::vector, "attn_q_norm.weight", {hd});
      add_layer_tensor(t, il, K::attn_k_norm, R::vector, "attn_k_norm.weight", {hd});
    } else {
      add_layer_tensor(t, il, K::conv, R::vector, "shortconv.conv.weight", {c.l_cache, H});
      add_layer_tensor(t, il, K::conv_in_proj, R::matmul, "shortconv.in_proj.weight", {H, 3 * H});
      add_layer_tensor(t, il, K::conv_out_proj, R::matmul, "shortconv.out_proj.weight", {H, H});
    }
    add_layer_tensor(t, il, K::ffn_norm, R::vector, "ffn_norm.weight", {H});
    if (il < c.n_dense_lead) {
      const int64_t ff = c.n_ff[static_cast<size_t>(il)];
      add_layer_tensor(t, il, K::ffn_gate, R::matmul, "ffn_gate.weight", {H, ff});
      add_layer_tensor(t, il, K::ffn_down, R::matmul, "ffn_down.weight", {ff, H});
      add_layer_tensor(t, il, K::ffn_up, R::matmul, "ffn_up.weight", {H, ff});
      continue;
    }
    const int64_t E = c.n_expert, F = c.n_ff_exp;
    add_layer_tensor(t, il, K::router, R::router, "ffn_gate_inp.weight", {H, E});
    add_layer_tensor(t, il, K::gate_exps, R::expert, "ffn_gate_exps.weight", {H, F, E});
    add_layer_tensor(t, il, K::down_exps, R::expert, "ffn_down_exps.weight", {F, H, E});
    add_layer_tensor(t, il, K::up_exps, R::expert, "ffn_up_exps.weight", {H, F, E});
    // Older conversions call it blk.N.exp_probs_b.
    add_layer_tensor(t, il, K::selection_bias, R::vector, "exp_probs_b.bias", {E}).alias =
        fmt::format("blk.{}.exp_probs_b", il);
  }
  return t;
}

}  // namespace df::models

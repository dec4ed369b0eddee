#include "synth/arch_tensors.h"

#include "models/gemma4_tensors.h"
#include "models/hy_v3_tensors.h"
#include "models/lfm2moe_tensors.h"
#include "models/qwen35moe_tensors.h"
#include "models/qwen3moe_tensors.h"

namespace df::synth {

models::Lfm2MoeConfig lfm2moe_config_of(const Config& c) {
  const Shape& s = c.shape;
  models::Lfm2MoeConfig m;
  m.name = c.name;
  m.n_layer = s.n_layer, m.n_embd = s.n_embd, m.n_vocab = s.n_vocab, m.n_ctx_train = s.n_ctx_train;
  m.n_head = s.n_head, m.n_head_kv = s.n_head_kv, m.head_dim = s.head_dim, m.n_rot = s.head_dim;
  for (int il = 0; il < s.n_layer; ++il) {
    m.attn.push_back(c.is_attention_layer(il));
    m.n_ff.push_back(il < s.n_dense_lead ? s.n_ff : 0);
  }
  m.n_dense_lead = s.n_dense_lead;
  m.n_expert = s.n_expert, m.n_expert_used = s.n_expert_used, m.n_ff_exp = s.n_ff_exp;
  m.l_cache = s.conv_l_cache;
  m.eps = s.rms_eps, m.rope_theta = s.rope_theta;
  return m;
}

models::Qwen3MoeConfig qwen3moe_config_of(const Config& c) {
  const Shape& s = c.shape;
  models::Qwen3MoeConfig m;
  m.name = c.name;
  m.n_layer = s.n_layer, m.n_embd = s.n_embd, m.n_vocab = s.n_vocab, m.n_ctx_train = s.n_ctx_train;
  m.n_head = s.n_head, m.n_head_kv = s.n_head_kv, m.head_dim = s.head_dim;
  m.n_expert = s.n_expert, m.n_expert_used = s.n_expert_used, m.n_ff_exp = s.n_ff_exp;
  m.eps = s.rms_eps, m.rope_theta = s.rope_theta;
  return m;
}

models::HyV3Config hy_v3_config_of(const Config& c) {
  const Shape& s = c.shape;
  models::HyV3Config m;
  m.name = c.name;
  m.n_layer = s.n_layer, m.n_embd = s.n_embd, m.n_vocab = s.n_vocab, m.n_ctx_train = s.n_ctx_train;
  m.n_head = s.n_head, m.n_head_kv = s.n_head_kv, m.head_dim = s.head_dim;
  for (int il = 0; il < s.n_layer; ++il) m.moe.push_back(c.is_moe_layer(il));
  m.n_ff = s.n_ff;
  m.n_expert = s.n_expert, m.n_expert_used = s.n_expert_used, m.n_ff_exp = s.n_ff_exp;
  m.n_ff_shexp = s.n_ff_shexp;
  m.weights_norm = true;
  m.expert_weights_scale = s.expert_weights_scale;
  m.eps = s.rms_eps, m.rope_theta = s.rope_theta;
  return m;
}

models::Qwen35MoeConfig qwen35moe_config_of(const Config& c) {
  const Shape& s = c.shape;
  models::Qwen35MoeConfig m;
  m.name = c.name;
  m.n_layer = s.n_layer, m.n_embd = s.n_embd, m.n_vocab = s.n_vocab, m.n_ctx_train = s.n_ctx_train;
  for (int il = 0; il < s.n_layer; ++il) m.recurrent.push_back(!c.is_attention_layer(il));
  m.n_head = s.n_head, m.n_head_kv = s.n_head_kv, m.head_dim = s.head_dim, m.n_rot = s.n_rot;
  m.conv_taps = s.ssm_conv_kernel;
  m.dn_k_heads = s.dn_k_heads, m.dn_v_heads = s.dn_v_heads, m.dn_head_dim = s.dn_head_dim;
  m.n_expert = s.n_expert, m.n_expert_used = s.n_expert_used, m.n_ff_exp = s.n_ff_exp;
  m.n_ff_shexp = s.n_ff_shexp;
  m.eps = s.rms_eps, m.rope_theta = s.rope_theta;
  return m;
}

models::Gemma4Config gemma4_config_of(const Config& c) {
  const Shape& s = c.shape;
  models::Gemma4Config m;
  m.name = c.name;
  m.n_layer = s.n_layer, m.n_embd = s.n_embd, m.n_vocab = s.n_vocab, m.n_ctx_train = s.n_ctx_train;
  m.n_head = s.n_head;
  for (int il = 0; il < s.n_layer; ++il) {
    const bool global = c.is_global_layer(il);
    m.swa.push_back(!global);
    m.n_head_kv.push_back(global ? s.n_head_kv_global : s.n_head_kv);
    m.head_dim.push_back(global ? s.head_dim_global : s.head_dim);
    m.n_rot.push_back(global ? s.head_dim_global : s.head_dim);
    m.n_ff.push_back(s.n_ff);
    m.moe.push_back(c.is_moe_layer(il));
  }
  m.n_swa = s.n_swa;
  m.n_expert = s.n_expert, m.n_expert_used = s.n_expert_used, m.n_ff_exp = s.n_ff_exp;
  m.eps = s.rms_eps, m.rope_theta = s.rope_theta_global, m.rope_theta_swa = s.rope_theta;
  m.final_logit_softcap = s.logit_softcap;
  return m;
}

std::vector<models::TensorDesc> described_tensors(const Config& c) {
  switch (c.arch) {
    case Arch::lfm2moe:
      return models::lfm2moe_tensors(lfm2moe_config_of(c));
    case Arch::qwen3moe:
      return models::qwen3moe_tensors(qwen3moe_config_of(c));
    case Arch::hy_v3:
      return models::hy_v3_tensors(hy_v3_config_of(c));
    case Arch::qwen35moe:
      return models::qwen35moe_tensors(qwen35moe_config_of(c));
    case Arch::gemma4:
      break;
  }
  return models::gemma4_tensors(gemma4_config_of(c));
}

}  // namespace df::synth

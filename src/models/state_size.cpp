#include "models/state_size.h"

#include <algorithm>

#include "backend/backend_factory.h"
#include "gguf/gguf.h"
#include "models/gemma4.h"
#include "models/gpt_oss.h"
#include "models/hy_v3.h"
#include "models/lfm2moe.h"
#include "models/model.h"
#include "models/moe_block.h"
#include "models/qwen35moe.h"
#include "models/qwen3moe.h"
#include "models/sequence_state.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::models {
namespace {

template <class Config>
StateDims common_dims(const Config& c, int n_kv_layers) {
  StateDims d;
  d.n_layer = c.n_layer;
  d.n_kv_layers = n_kv_layers;
  d.n_head_kv = c.n_head_kv;
  d.head_dim = c.head_dim;
  d.n_embd = static_cast<size_t>(c.n_embd);
  d.q_dim = static_cast<size_t>(c.n_head) * static_cast<size_t>(c.head_dim);
  d.kv_dim = static_cast<size_t>(c.n_head_kv) * static_cast<size_t>(c.head_dim);
  d.n_expert = static_cast<size_t>(c.n_expert);
  d.k = static_cast<size_t>(c.n_expert_used);
  return d;
}

// The widest activation row any matrix of the file would quantize (its first dimension is the input).
size_t widest_act_row(const gguf::File& f) {
  size_t widest = 0;
  for (const auto& t : f.tensors()) {
    if (t.n_dims < 2) continue;  // norms, biases: no matmul (f32 routers are matmuls)
    try {
      widest = std::max(widest, ggml_row_bytes(quant::vec_dot_type(t.type), t.ne[0]));
    } catch (const Error&) {
      // a type without a dot product: the loader refuses it with its own message
    }
  }
  return widest;
}

// How many layers of `range` (of n_layer) `is` says yes to.
template <class Is>
int count_layers(LayerRange range, int n_layer, Is&& is) {
  int n = 0;
  for (int l = 0; l < n_layer; ++l) n += range.holds(l, n_layer) && is(static_cast<size_t>(l)) ? 1 : 0;
  return n;
}
int count_layers(LayerRange range, int n_layer) {
  return count_layers(range, n_layer, [](size_t) { return true; });
}

}  // namespace

StateDims state_dims_of(const Lfm2MoeConfig& c, LayerRange range) {
  const int n_attn = count_layers(range, c.n_layer, [&](size_t l) { return c.attn[l]; });
  const int n_held = count_layers(range, c.n_layer);
  StateDims d = common_dims(c, n_attn);
  const size_t H = d.n_embd, n_conv = static_cast<size_t>(n_held - n_attn);
  d.extra_bytes_per_token = 4 * H * sizeof(float);  // y (H) and bcx (3H)
  d.fixed_bytes = n_conv * static_cast<size_t>(std::max(c.l_cache - 1, 0)) * H * sizeof(float) +
                  ExpertWave::bytes_for(d.n_expert);
  return d;
}

StateDims state_dims_of(const Qwen3MoeConfig& c, LayerRange range) {
  StateDims d = common_dims(c, count_layers(range, c.n_layer));
  d.fixed_bytes = ExpertWave::bytes_for(d.n_expert);
  return d;
}

StateDims state_dims_of(const HyV3Config& c, LayerRange range) {
  StateDims d = common_dims(c, count_layers(range, c.n_layer));
  d.fixed_bytes = ExpertWave::bytes_for(d.n_expert);
  return d;
}

StateDims state_dims_of(const Gemma4Config& c, LayerRange range) {
  StateDims d;
  d.n_layer = c.n_layer;
  d.n_kv_layers = 0;  // every layer's KV has its own sizes: counted per position below
  for (size_t l = 0; l < static_cast<size_t>(c.n_layer); ++l)
    if (range.holds(static_cast<int>(l), c.n_layer))
      d.other_kv_bytes_per_position += LayerStateSpec::kv(c.n_head_kv[l], c.head_dim[l]).bytes(1);
  d.head_dim = c.max_head_dim();  // the attention scratch is sized for the widest head
  d.n_embd = static_cast<size_t>(c.n_embd);
  d.q_dim = static_cast<size_t>(c.max_q_dim());
  d.kv_dim = static_cast<size_t>(c.max_kv_dim());
  d.n_expert = static_cast<size_t>(c.n_expert);
  d.k = static_cast<size_t>(c.n_expert_used);
  d.extra_bytes_per_token = d.n_embd * sizeof(float);  // the expert branch's sum (moe_sum)
  d.fixed_bytes = ExpertWave::bytes_for(d.n_expert);
  return d;
}

StateDims state_dims_of(const Qwen35MoeConfig& c, LayerRange range) {
  const LayerStateSpec dn =
      LayerStateSpec::delta_net(c.conv_taps, c.conv_channels(), c.dn_v_heads, c.dn_head_dim, c.dn_head_dim);
  const int n_attn = count_layers(range, c.n_layer, [&](size_t l) { return !c.recurrent[l]; });
  const uint64_t recurrent =
      static_cast<uint64_t>(count_layers(range, c.n_layer, [&](size_t l) { return c.recurrent[l]; })) *
      dn.bytes(0);
  StateDims d = common_dims(c, n_attn);
  d.extra_bytes_per_token = qwen35moe_extra_bytes_per_token(c);
  d.fixed_bytes = static_cast<size_t>(recurrent) + ExpertWave::bytes_for(d.n_expert);
  return d;
}

StateDims state_dims_of(const GptOssConfig& c, LayerRange range) {
  StateDims d = common_dims(c, count_layers(range, c.n_layer));
  d.fixed_bytes = ExpertWave::bytes_for(d.n_expert);
  return d;
}

uint64_t state_bytes(const StateDims& d, int n_ctx, int n_batch, int n_threads) {
  const size_t t = static_cast<size_t>(std::max(n_batch, 0));
  const uint64_t kv = static_cast<uint64_t>(std::max(d.n_kv_layers, 0)) *
                          LayerStateSpec::kv(d.n_head_kv, d.head_dim).bytes(n_ctx) +
                      d.other_kv_bytes_per_position * static_cast<uint64_t>(std::max(n_ctx, 0));
  const uint64_t attn_floats = backend::attention_scratch_floats_for(
      backend::BackendOptions{"cpu", std::max(n_threads, 1)}, n_ctx, d.head_dim);
  return kv + attn_floats * sizeof(float) + d.fixed_bytes +
         TrunkBuffers::bytes_for(t, d.n_embd, d.q_dim, d.kv_dim, d.act_row_bytes) +
         MoeBuffers::bytes_for(t, d.n_embd, d.n_expert, d.k) + t * d.extra_bytes_per_token;
}

StateDims state_dims(const gguf::File& file) {
  const std::string arch = file.require_string("general.architecture");
  StateDims d;
  if (arch == "lfm2moe")
    d = state_dims_of(lfm2moe_config(file));
  else if (arch == "qwen3moe")
    d = state_dims_of(qwen3moe_config(file));
  else if (arch == "gpt-oss")
    d = state_dims_of(gpt_oss_config(file));
  else if (arch == "hy_v3")
    d = state_dims_of(hy_v3_config(file));
  else if (arch == "gemma4")
    d = state_dims_of(gemma4_config(file));
  else if (arch == "qwen35moe")
    d = state_dims_of(qwen35moe_config(file));
  else
    fail("{}: unsupported architecture '{}' (supported: {})", file.path(), arch, kSupportedArchitectures);
  d.act_row_bytes = widest_act_row(file);
  return d;
}

}  // namespace df::models

// qwen3moe weight binding (ARCHITECTURES.md 2.2): every dense tensor checked for presence, shape and type,
// then read into RAM; the routed experts are described to the expert provider, which loads them.
#include <fmt/format.h>

#include <algorithm>

#include "gguf/gguf.h"
#include "models/qwen3moe.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {

Qwen3MoeModel::Qwen3MoeModel(const gguf::File& file, const LoadOptions& options)
    : cfg_(qwen3moe_config(file)),
      prefetch_lookahead_(std::max(0, options.prefetch_lookahead)),
      backend_(std::make_unique<backend::CpuBackend>(options.n_threads)) {
  const int64_t H = cfg_.n_embd, hd = cfg_.head_dim, E = cfg_.n_expert, F = cfg_.n_ff_exp;
  const int64_t q_dim = static_cast<int64_t>(cfg_.n_head) * hd,
                kv_dim = static_cast<int64_t>(cfg_.n_head_kv) * hd;
  WeightLoader w(file, *backend_, "qwen3moe");

  tok_embd_ = w.matrix("token_embd.weight", H, cfg_.n_vocab);
  output_norm_ = w.f32("output_norm.weight", {H});
  output_ = w.has("output.weight") ? w.matrix("output.weight", H, cfg_.n_vocab) : tok_embd_;

  const auto blk = [](int il, const char* name) { return fmt::format("blk.{}.{}", il, name); };
  layers_.resize(static_cast<size_t>(cfg_.n_layer));
  for (int il = 0; il < cfg_.n_layer; ++il) {
    Layer& l = layers_[static_cast<size_t>(il)];
    l.attn_norm = w.f32(blk(il, "attn_norm.weight"), {H});
    l.wq = w.matrix(blk(il, "attn_q.weight"), H, q_dim);
    l.wk = w.matrix(blk(il, "attn_k.weight"), H, kv_dim);
    l.wv = w.matrix(blk(il, "attn_v.weight"), H, kv_dim);
    l.wo = w.matrix(blk(il, "attn_output.weight"), q_dim, H);
    l.q_norm = w.f32(blk(il, "attn_q_norm.weight"), {hd});
    l.k_norm = w.f32(blk(il, "attn_k_norm.weight"), {hd});
    l.ffn_norm = w.f32(blk(il, "ffn_norm.weight"), {H});
    l.router = w.matrix(blk(il, "ffn_gate_inp.weight"), H, E);

    ExpertLayerLayout el;
    el.model_layer = il;
    el.n_expert = cfg_.n_expert;
    el.n_embd = H;
    el.n_ff = F;
    el.gate_name = blk(il, "ffn_gate_exps.weight");
    el.up_name = blk(il, "ffn_up_exps.weight");
    el.down_name = blk(il, "ffn_down_exps.weight");
    el.gate_type = w.matmul_type(el.gate_name, {H, F, E});
    el.up_type = w.matmul_type(el.up_name, {H, F, E});
    el.down_type = w.matmul_type(el.down_name, {F, H, E});
    expert_layout_.layers.push_back(std::move(el));
  }
  storage_ = w.take_storage();

  // Activation scratch is sized once for the widest row any matmul quantizes.
  const auto widen = [&](GgmlType t, int64_t n_in) {
    max_act_row_bytes_ = std::max(max_act_row_bytes_, backend_->matmul_scratch_bytes(t, n_in, 1));
  };
  widen(output_.type, H);
  for (const Layer& l : layers_)
    for (const backend::Weight* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.router}) widen(m->type, m->n_in);
  for (const auto& el : expert_layout_.layers) {
    widen(el.gate_type, el.n_embd);
    widen(el.up_type, el.n_embd);
    widen(el.down_type, el.n_ff);
  }

  experts_ = options.make_expert_provider ? options.make_expert_provider(file, expert_layout_)
                                          : std::make_unique<ResidentExpertProvider>(file, expert_layout_);
  if (!experts_) fail("{}: the expert provider factory returned nothing", file.path());

  info_.arch = "qwen3moe";
  info_.name = cfg_.name;
  info_.n_vocab = cfg_.n_vocab;
  info_.n_ctx_train = cfg_.n_ctx_train;
  info_.n_layer = cfg_.n_layer;
  info_.n_embd = cfg_.n_embd;
  info_.n_head = cfg_.n_head;
  info_.n_head_kv = cfg_.n_head_kv;
  info_.head_dim = cfg_.head_dim;
  info_.n_expert = cfg_.n_expert;
  info_.n_expert_used = cfg_.n_expert_used;
  for (const auto& el : expert_layout_.layers) info_.moe_layers.push_back(el.model_layer);
  info_.attn_layers.assign(static_cast<size_t>(cfg_.n_layer), true);
  info_.rms_eps = cfg_.eps;
  info_.rope_theta = cfg_.rope_theta;
}

std::unique_ptr<Model> load_qwen3moe(const gguf::File& file, const LoadOptions& options) {
  return std::make_unique<Qwen3MoeModel>(file, options);
}

}  // namespace df::models

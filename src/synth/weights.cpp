#include "synth/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <string>
#include <thread>

#include "models/tensor_desc.h"
#include "quant/quant.h"
#include "synth/arch_tensors.h"
#include "synth/rng.h"
#include "util/error.h"

namespace df::synth {

namespace {

// RMS of silu(a) * b for independent standard normal a, b: sqrt(E[silu(a)^2]) = 0.5965.
constexpr float kSwigluRms = 0.5965f;
// Relative jitter of norm weights around their mean, so that engines which ignore a norm weight are caught.
constexpr float kNormJitter = 0.05f;
// Mean of the Q and K norm weights: attention scores get a std of about kQkNorm^2, peaked enough that the
// attention output keeps its RMS over long contexts.
constexpr float kQkNorm = 1.5f;
// Std of the short-conv taps; the conv output then has an RMS of about sqrt(3) * kConvStd.
constexpr float kConvStd = 0.5f;
// The delta-net decay g = softplus(alpha + dt_bias) · ssm_a: dt_bias around -3 makes softplus ~0.05, and
// rates up to 8 give per-token decays e^g from ~0.95 to ~0.67, memories of a few to tens of tokens.
constexpr float kDtBiasMean = -3.0f;
constexpr float kDtBiasStd = 0.5f;
constexpr float kMaxDecayRate = 8.0f;

class Planner {
 public:
  explicit Planner(const Config& c) : c_(c), s_(c.shape), n_(c.numerics), H_(s_.n_embd) {
    route_from_ = H_ - n_.route_dims;
  }

  // One recipe per described tensor, in the description's (file) order; lfm2moe's optional untied head is
  // left out (LFM2 ties it).
  std::vector<TensorRecipe> plan() {
    const bool tied = c_.arch == Arch::lfm2moe || c_.arch == Arch::gemma4;
    for (const models::TensorDesc& t : described_tensors(c_)) {
      if (t.kind == K::output && tied) continue;
      // Gemma 4's global layers take V from the K projection (no attn_v), as the 26B-A4B does.
      if (t.kind == K::attn_v && c_.is_global_layer(t.layer)) continue;
      // Gemma 4's converter writes fused gate/up experts, the others separate ones.
      if (c_.arch == Arch::gemma4 ? !t.replaced_by.empty() : t.kind == K::gate_up_exps) continue;
      recipe(t, tied);
    }
    return std::move(out_);
  }

 private:
  using K = models::TensorKind;

  void recipe(const models::TensorDesc& t, bool tied) {
    const float in_std = 1.0f / std::sqrt(float(H_));  // unit-RMS input -> unit-RMS projections
    const float g = n_.block_gain;
    const auto& ne = t.ne;
    switch (t.kind) {
      case K::token_embd:
        return normal(t, table_std());
      case K::output_norm:
        // Tied head: logits = E (x_hat * w); std over the vocabulary = table std * sqrt(H) * |w|.
        return norm(t, tied ? n_.logit_std / (table_std() * std::sqrt(float(H_))) : 1.0f);
      case K::output:
        return normal(t, n_.logit_std / std::sqrt(float(H_)));
      case K::attn_norm:
      case K::ffn_norm:
      case K::ffn_pre_norm_2:
      case K::router_scale:
      case K::down_exps_scale:
      case K::layer_out_scale:
        return norm(t, 1.0f);
      // gemma4 norms every block's output: the weight is the RMS it adds to the residual stream.
      case K::post_attn_norm:
      case K::ffn_post_norm:
        return norm(t, g);
      case K::ffn_post_norm_1:
      case K::ffn_post_norm_2:
        return norm(t, 1.0f);  // each branch of the sum that post_ffw_norm then scales
      case K::rope_freqs:
        return rope_freqs(t);
      case K::attn_q:
      case K::attn_k:
      case K::attn_v:
      case K::conv_in_proj:
      case K::ffn_gate:
      case K::ffn_up:
      case K::gate_exps:
      case K::up_exps:
      case K::gate_up_exps:
      case K::shared_gate:
      case K::shared_up:
        return normal(t, in_std);
      case K::attn_output:
        return output_proj(t, g / std::sqrt(float(ne[0])));
      case K::attn_q_norm:
      case K::attn_k_norm:
        // gemma4 attends with scale 1, not 1/sqrt(d): the norms take that factor, d^(-1/4) each, so that the
        // scores have the same spread as the other architectures' (a wider one makes the model chaotic:
        // llama.cpp's own kernel paths then disagree by tens of logits).
        if (c_.arch == Arch::gemma4) return norm(t, kQkNorm / std::pow(float(ne[0]), 0.25f));
        return norm(t, kQkNorm);
      case K::conv:
        return normal(t, kConvStd);
      case K::conv_out_proj: {
        const float conv_rms = std::sqrt(float(s_.conv_l_cache)) * kConvStd;
        return output_proj(t, g / (conv_rms * std::sqrt(float(H_))));
      }
      case K::ffn_down:
        return output_proj(t, g / (kSwigluRms * std::sqrt(float(ne[0]))));
      case K::router:
        return router(t);
      case K::down_exps: {
        // k experts mixed with weights summing to 1 have ~1/sqrt(k) of one expert's RMS; hy_v3 scales the
        // weights by expert_weights_scale and adds a shared expert beside them, each half the block's gain.
        const float scale = s_.expert_weights_scale > 0 ? s_.expert_weights_scale : 1.0f;
        return output_proj(t, shared_split() * g * std::sqrt(float(s_.n_expert_used)) /
                                  (scale * kSwigluRms * std::sqrt(float(ne[0]))));
      }
      case K::shared_down:
        return output_proj(t, shared_split() * g / (kSwigluRms * std::sqrt(float(ne[0]))));
      case K::selection_bias:
        return normal(t, n_.bias_std);
      case K::dn_qkv:
      case K::dn_gate:
      case K::dn_beta:
      case K::shared_gate_inp:
        return normal(t, in_std);
      case K::dn_alpha:
        return normal(t, 0.5f * in_std);
      case K::dn_dt_bias:
        return shifted(t, kDtBiasMean, kDtBiasStd);
      case K::dn_a:
        return decay_rates(t);
      case K::dn_norm:
        return norm(t, 1.0f);
      case K::dn_out:
        return output_proj(t, g / (kSwigluRms * std::sqrt(float(ne[0]))));
      default:
        fail("internal: make-model has no weight distribution for '{}'", t.name);
    }
  }

  // gemma4 multiplies the looked-up embedding by sqrt(H): its table is that much smaller, so that the stream
  // starts at embd_std RMS as the other architectures' does (and the tied head is not dominated by it).
  float table_std() const {
    return c_.arch == Arch::gemma4 ? n_.embd_std / std::sqrt(float(H_)) : n_.embd_std;
  }

  // Proportional RoPE as Gemma 4's converter writes it: a divisor of 1 for the rotated share of the pairs,
  // 1e30 (no rotation) for the rest.
  void rope_freqs(const models::TensorDesc& t) {
    TensorRecipe r = base(t);
    const int64_t pairs = t.ne[0];
    const auto rotated = static_cast<int64_t>(s_.partial_rotary_global * float(2 * pairs)) / 2;
    for (int64_t i = 0; i < pairs; ++i) r.values.push_back(i < rotated ? 1.0f : 1e30f);
    out_.push_back(std::move(r));
  }

  // With a shared expert the routed and shared outputs each add half the block's variance.
  float shared_split() const {
    return c_.arch == Arch::hy_v3 || c_.arch == Arch::qwen35moe ? std::sqrt(0.5f) : 1.0f;
  }

  // ssm_a = -exp(A_log) per value head, spread geometrically over [-kMaxDecayRate, -1] so that the heads
  // forget at different speeds (the real A_log is initialised uniformly over a similar range).
  void decay_rates(const models::TensorDesc& t) {
    TensorRecipe r = base(t);
    const int64_t n = t.ne[0];
    for (int64_t h = 0; h < n; ++h) {
      const float f = n > 1 ? float(h) / float(n - 1) : 0.0f;
      r.values.push_back(-std::pow(kMaxDecayRate, f));
    }
    out_.push_back(std::move(r));
  }
  void shifted(const models::TensorDesc& t, float mean, float std) {
    TensorRecipe r = base(t);
    r.mean = mean;
    r.std = std;
    out_.push_back(std::move(r));
  }

  // The stored type: the Types choice for the role; routers, norms, biases and conv taps stay F32.
  GgmlType type_of(const models::TensorDesc& t) const {
    switch (t.role) {
      case models::TensorRole::table:
        return c_.types.token_embd;
      case models::TensorRole::matmul:
        return t.kind == K::output ? c_.types.output : c_.types.matmul;
      case models::TensorRole::expert:
        return c_.types.experts;
      case models::TensorRole::router:
      case models::TensorRole::vector:
        break;
    }
    return GgmlType::F32;
  }

  // Router logits z = W (x_hat * w). With route dims, x_hat there is the token embedding over the residual
  // RMS at this point, so W's std undoes both to give z a std of router_std.
  void router(const models::TensorDesc& t) {
    TensorRecipe r = base(t);
    if (n_.route_dims > 0) {
      const float rms = expected_residual_rms(n_, 2 * t.layer + 1);
      r.std = n_.router_std * rms / (std::sqrt(float(n_.route_dims)) * n_.embd_std);
      if (c_.arch == Arch::gemma4) r.std *= std::sqrt(float(H_));  // its router reads rms_norm(x) / sqrt(H)
      r.cols_from = route_from_;
    } else {
      r.std = n_.router_std / std::sqrt(float(H_));
    }
    out_.push_back(std::move(r));
  }

  TensorRecipe base(const models::TensorDesc& t) const {
    TensorRecipe r;
    r.spec.name = t.name;
    r.spec.type = type_of(t);
    r.spec.ne = t.ne;
    return r;
  }
  void normal(const models::TensorDesc& t, float std) {
    TensorRecipe r = base(t);
    r.std = std;
    out_.push_back(std::move(r));
  }
  void norm(const models::TensorDesc& t, float mean) {
    TensorRecipe r = base(t);
    r.mean = mean;
    r.std = mean * kNormJitter;
    out_.push_back(std::move(r));
  }
  // A projection into the residual stream: its rows for the route dims stay zero.
  void output_proj(const models::TensorDesc& t, float std) {
    TensorRecipe r = base(t);
    r.std = std;
    r.zero_rows_from = route_from_;
    out_.push_back(std::move(r));
  }

  const Config& c_;
  const Shape& s_;
  const Numerics& n_;
  int64_t H_;
  int64_t route_from_;
  std::vector<TensorRecipe> out_;
};

}  // namespace

int64_t TensorRecipe::rows() const {
  int64_t r = 1;
  for (size_t d = 1; d < spec.ne.size(); ++d) r *= spec.ne[d];
  return r;
}
int64_t TensorRecipe::row_len() const { return spec.ne[0]; }
size_t TensorRecipe::row_bytes() const { return ggml_row_bytes(spec.type, spec.ne[0]); }

std::vector<TensorRecipe> plan_tensors(const Config& c) { return Planner(c).plan(); }

float expected_residual_rms(const Numerics& n, int blocks) {
  return std::sqrt(n.embd_std * n.embd_std + float(blocks) * n.block_gain * n.block_gain);
}

void generate_rows(const TensorRecipe& r, uint64_t seed, int64_t row_begin, int64_t row_end,
                   std::span<uint8_t> out) {
  const int64_t n = r.row_len();
  const size_t rb = r.row_bytes();
  if (row_begin < 0 || row_end > r.rows() || row_begin > row_end ||
      out.size() != size_t(row_end - row_begin) * rb)
    fail("internal: bad row range [{}, {}) of '{}'", row_begin, row_end, r.spec.name);
  const int64_t slab_rows = r.spec.ne.size() > 1 ? r.spec.ne[1] : 1;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t row = row_begin; row < row_end; ++row) {
    if (!r.values.empty()) {
      if (r.values.size() != size_t(n) || r.rows() != 1)
        fail("internal: fixed values of '{}' do not fit", r.spec.name);
      values = r.values;
    } else if (r.zero_rows_from >= 0 && row % slab_rows >= r.zero_rows_from) {
      std::fill(values.begin(), values.end(), 0.0f);
    } else {
      Rng rng(row_seed(seed, r.spec.name, static_cast<uint64_t>(row)));
      for (int64_t j = 0; j < n; ++j) {
        const float v = r.mean + r.std * rng.normal();
        values[size_t(j)] = j < r.cols_from ? 0.0f : v;
      }
    }
    quant::quantize_row(r.spec.type, values.data(), out.data() + size_t(row - row_begin) * rb, n);
  }
}

void generate_tensor(const TensorRecipe& r, uint64_t seed, std::span<uint8_t> out, int threads) {
  const int64_t rows = r.rows();
  const size_t rb = r.row_bytes();
  if (out.size() != size_t(rows) * rb)
    fail("internal: '{}' needs {} bytes, got {}", r.spec.name, rows * rb, out.size());
  if (threads <= 0)
    threads = static_cast<int>(std::min(16u, std::max(1u, std::thread::hardware_concurrency())));
  // Chunks of about 1 MiB of values: small tensors stay on this thread.
  const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, r.row_len()));
  const int64_t n_chunks = (rows + chunk - 1) / chunk;
  const auto run_chunk = [&](int64_t c) {
    const int64_t b = c * chunk, e = std::min(rows, b + chunk);
    generate_rows(r, seed, b, e, out.subspan(size_t(b) * rb, size_t(e - b) * rb));
  };
  if (threads == 1 || n_chunks == 1) {
    for (int64_t c = 0; c < n_chunks; ++c) run_chunk(c);
    return;
  }
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  for (int t = 0; t < std::min<int64_t>(threads, n_chunks); ++t)
    pool.emplace_back([&] {
      try {
        for (int64_t c; !failed && (c = next.fetch_add(1)) < n_chunks;) run_chunk(c);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    });
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace df::synth

// Host side of the non-matmul ops: the CPU backend's checks, the scalar parameters computed on the host
// exactly as the CPU computes them (RoPE's theta_scale and YaRN band), then one launch each.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>

#include "backend/buffer_access.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "util/error.h"

namespace df::backend {
namespace {

using BA = BufferAccess;

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

template <class T>
void need(Buf<T> b, int64_t count, const char* what) {
  if (count < 0 || static_cast<size_t>(count) > b.size())
    fail("cuda backend: {} needs {} elements, its buffer view has {}", what, count, b.size());
}

template <class T>
const T* raw_or_null(Buf<T> b) {
  return b ? BA::raw(b) : nullptr;
}

cuda::RouteArgs route_args(const RouterParams& p) {
  cuda::RouteArgs a{};
  a.gating = static_cast<int>(p.gating);
  a.n_expert = p.n_expert;
  a.k = p.k;
  a.selection_bias = raw_or_null(p.selection_bias);
  a.normalize = p.normalize ? 1 : 0;
  a.scale = p.scale;
  return a;
}

float yarn_corr_dim(int n_dims, int n_ctx_orig, float beta, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (beta * 2.0f * std::numbers::pi_v<float>)) /
         (2.0f * std::log(base));
}

// Score rows (n_head × n_ctx floats per query row) one attention launch may keep in scratch.
constexpr size_t kMaxScoreFloats = size_t{64} << 20;

// RopeParams as the kernels take them, after the checks every RoPE op makes.
cuda::RopeArgs rope_args(const RopeParams& p, int head_dim) {
  const int n = p.n_rot, half = n / 2;
  if (n <= 0 || n % 2 != 0 || n > head_dim || half > 512)
    fail("rope: rotated dims {} must be even, positive and at most the head dim {} (and {})", n, head_dim,
         1024);
  if (p.ext_factor != 0.0f && p.n_ctx_orig <= 0)
    fail("rope: YaRN needs the original context length (got {})", p.n_ctx_orig);
  cuda::RopeArgs a{};
  a.n_rot = n;
  a.neox = p.mode == RopeMode::NeoX ? 1 : 0;
  a.theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(n));
  a.freq_scale = p.freq_scale;
  a.ext_factor = p.ext_factor;
  a.attn_factor = p.attn_factor;
  if (p.ext_factor != 0.0f) {
    a.corr_lo = std::max(0.0f, std::floor(yarn_corr_dim(n, p.n_ctx_orig, p.beta_fast, p.freq_base)));
    a.corr_hi = std::min(static_cast<float>(n - 1),
                         std::ceil(yarn_corr_dim(n, p.n_ctx_orig, p.beta_slow, p.freq_base)));
    a.yarn_mag = 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
  }
  a.freq_factors = raw_or_null(p.freq_factors);
  return a;
}

}  // namespace

void CudaBackend::get_rows(const Weight& table, Buf<const int32_t> ids, int64_t n, Buf<float> out) {
  const auto timer = timed({"get_rows"});
  if (n <= 0) return;
  if (table.packed())
    fail("cuda backend: get_rows on a {} table: row lookups need the unpacked layout",
         quant::row_packing_name(table.packing));
  if (!quant::is_supported(table.type))  // the kernels dequantize every type quant/ implements
    fail("cuda backend: get_rows of a {} table is not supported", ggml_type_name(table.type));
  need(ids, n, "get_rows ids");
  need(out, n * table.n_in, "get_rows output");
  // Ids are checked on the device; one out of range is reported at the next synchronisation (download).
  if (skip_op("get_rows", BA::raw(out), n, table.n_in)) return;
  cuda::launch_get_rows(table.type, static_cast<const uint8_t*>(table.data), table.row_bytes(), table.n_out,
                        table.n_in, BA::raw(ids), n, BA::raw(out),
                        static_cast<cuda::DeviceError*>(error_word_device_), as_stream(stream_));
}

void CudaBackend::gather_rows(Buf<const float> table, int64_t width, Buf<const int32_t> ids, int64_t n,
                              Buf<float> out) {
  const auto timer = timed({"gather_rows"});
  if (n <= 0) return;
  if (width <= 0) fail("gather_rows: rows of {} values", width);
  const int64_t n_rows = static_cast<int64_t>(table.size()) / width;
  need(ids, n, "gather_rows ids");
  need(out, n * width, "gather_rows output");
  if (skip_op("gather_rows", BA::raw(out), n, width)) return;
  // get_rows' kernel on an F32 table is an exact row copy; an id outside the table is reported (as a token
  // id) at the next synchronisation.
  cuda::launch_get_rows(GgmlType::F32, reinterpret_cast<const uint8_t*>(BA::raw(table)),
                        static_cast<size_t>(width) * sizeof(float), n_rows, width, BA::raw(ids), n,
                        BA::raw(out), static_cast<cuda::DeviceError*>(error_word_device_),
                        as_stream(stream_));
}

void CudaBackend::argmax(Buf<const float> x, int64_t rows, int64_t n, Buf<int32_t> ids) {
  const auto timer = timed({"argmax"});
  if (rows <= 0) return;
  if (n <= 0 || n > INT32_MAX) fail("argmax: rows of {} values", n);
  need(x, rows * n, "argmax input");
  need(ids, rows, "argmax output");
  if (skip_op("argmax", BA::raw(ids), rows, n)) return;
  cuda::launch_argmax(BA::raw(x), rows, n, BA::raw(ids), as_stream(stream_));
}

void CudaBackend::rms_norm(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight, float eps,
                           Buf<float> y) {
  normed_rows(x, rows, n, weight, eps, y, false);
}

void CudaBackend::normed_rows(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight, float eps,
                              Buf<float> y, bool quantize) {
  const auto timer = timed({"rms_norm"});
  if (rows <= 0 || n <= 0) return;
  need(x, rows * n, "rms_norm input");
  need(y, rows * n, "rms_norm output");
  if (weight) need(weight, n, "rms_norm weight");
  if (skip_op("rms_norm", BA::raw(y), rows, n)) return;
  if (quantize) {
    cuda::launch_rms_norm_q8(BA::raw(x), rows, n, raw_or_null(weight), eps, BA::raw(y),
                             quantized_output(BA::raw(y), rows, n), as_stream(stream_));
    return;
  }
  cuda::launch_rms_norm(BA::raw(x), rows, n, raw_or_null(weight), eps, BA::raw(y), as_stream(stream_));
}

void CudaBackend::rope(Buf<float> x, int64_t rows, int n_head, int head_dim, Buf<const int32_t> pos,
                       const RopeParams& p) {
  const auto timer = timed({"rope"});
  const cuda::RopeArgs a = rope_args(p, head_dim);
  if (rows <= 0) return;
  need(x, rows * n_head * head_dim, "rope input");
  need(pos, rows, "rope positions");
  if (p.freq_factors) need(p.freq_factors, p.n_rot / 2, "rope freq_factors");
  if (skip_op("rope", BA::raw(x), rows, n_head * head_dim)) return;
  cuda::launch_rope(BA::raw(x), rows, n_head, head_dim, BA::raw(pos), a, as_stream(stream_));
}

void CudaBackend::norm_rope(std::span<const NormRopeTask> tasks, int64_t rows, int head_dim, float eps,
                            Buf<const int32_t> pos, const RopeParams& p) {
  if (!cuda::norm_rope_shape(head_dim, p.n_rot, static_cast<int>(tasks.size()))) {
    for (const NormRopeTask& t : tasks) {
      rms_norm(t.x, rows * t.n_head, head_dim, t.weight, eps, t.x);
      rope(t.x, rows, t.n_head, head_dim, pos, p);
    }
    return;
  }
  const auto timer = timed({"norm_rope"});
  const cuda::RopeArgs a = rope_args(p, head_dim);
  if (rows <= 0) return;
  cuda::NormRopeArgs na{};
  na.n_tasks = static_cast<int>(tasks.size());
  na.head_dim = head_dim;
  na.eps = eps;
  int heads = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const NormRopeTask& t = tasks[i];
    heads += t.n_head;
    need(t.x, rows * t.n_head * head_dim, "norm_rope input");
    if (t.weight) need(t.weight, head_dim, "norm_rope weight");
    na.task[i] = {BA::raw(t.x), raw_or_null(t.weight), t.n_head};
  }
  need(pos, rows, "norm_rope positions");
  if (p.freq_factors) need(p.freq_factors, p.n_rot / 2, "norm_rope freq_factors");
  // Signed as rope is, by the values it rewrites a row: every task's heads.
  if (skip_op("norm_rope", na.task[0].x, rows, static_cast<int64_t>(heads) * head_dim)) return;
  cuda::launch_norm_rope(na, rows, BA::raw(pos), a, as_stream(stream_));
}

void CudaBackend::kv_store(const KvCacheView& kv, Buf<const float> k, Buf<const float> v, int64_t rows,
                           int pos0) {
  const auto timer = timed({"kv_store"});
  if (pos0 < 0 || pos0 + rows > kv.n_ctx)
    fail("kv cache: positions {}..{} do not fit in a context of {}", pos0, pos0 + rows - 1, kv.n_ctx);
  if (rows <= 0) return;
  const int64_t row = static_cast<int64_t>(kv.n_head_kv) * kv.head_dim;
  need(k, rows * row, "kv_store k");
  need(v, rows * row, "kv_store v");
  need(kv.k, static_cast<int64_t>(kv.n_ctx) * row, "kv cache K");
  need(kv.v, static_cast<int64_t>(kv.n_ctx) * row, "kv cache V");
  const int32_t* pos0_device = graph_.dynamic_int(pos0);
  if (skip_op("kv_store", BA::raw(kv.k), rows, row)) return;
  cuda::launch_kv_store(BA::raw(kv.k), BA::raw(kv.v), kv.n_ctx, row, BA::raw(k), BA::raw(v), rows, pos0,
                        pos0_device, as_stream(stream_));
}

size_t CudaBackend::attention_scratch_floats(int n_ctx, int head_dim) const {
  return attention_scratch_floats_for(n_ctx, head_dim);
}

// The scores live in the backend's own scratch (their size depends on the rows of the call, which memory
// planning does not know); the caller's scratch view is not read.
size_t CudaBackend::attention_scratch_floats_for(int, int) { return 1; }

void CudaBackend::attention(const KvCacheView& kv, Buf<const float> q, int64_t rows, int pos0,
                            const AttentionParams& p, Buf<float> out, Buf<float>) {
  const auto timer = timed({"attention"});
  if (rows <= 0) return;
  const int n_head = p.n_head;
  if (pos0 < 0 || pos0 + rows > kv.n_ctx)
    fail("attention: positions {}..{} do not fit in a context of {}", pos0, pos0 + rows - 1, kv.n_ctx);
  if (kv.n_head_kv <= 0 || n_head <= 0 || n_head % kv.n_head_kv != 0)
    fail("attention: {} query heads cannot share {} KV heads", n_head, kv.n_head_kv);
  if (p.window < 0) fail("attention: window {} must not be negative", p.window);
  if (kv.head_dim <= 0 || kv.head_dim > 4096) fail("attention: head dim {} is out of range", kv.head_dim);
  const int64_t hrow = static_cast<int64_t>(n_head) * kv.head_dim;
  need(q, rows * hrow, "attention q");
  need(out, rows * hrow, "attention output");
  const int64_t kv_row = static_cast<int64_t>(kv.n_head_kv) * kv.head_dim;
  need(kv.k, static_cast<int64_t>(kv.n_ctx) * kv_row, "kv cache K");
  need(kv.v, static_cast<int64_t>(kv.n_ctx) * kv_row, "kv cache V");
  if (p.sinks) need(p.sinks, n_head, "attention sinks");
  const size_t per_row = static_cast<size_t>(n_head) * static_cast<size_t>(kv.n_ctx);
  const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(kMaxScoreFloats / per_row), 1, 65535);
  if (skip_op("attention", BA::raw(out), rows, hrow)) {
    // Only the positions, which a replayed graph reads: it launches the chunks below.
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) (void)graph_.dynamic_int(pos0 + static_cast<int>(r0));
    return;
  }
  const int64_t chunk_rows = std::min(rows, chunk);
  auto* scores = static_cast<float*>(
      grow(attn_scratch_, static_cast<size_t>(chunk_rows) * per_row * sizeof(float), "attention scores"));
  cuda::AttnArgs a{};
  a.n_head = n_head;
  a.n_head_kv = kv.n_head_kv;
  a.head_dim = kv.head_dim;
  a.n_ctx = kv.n_ctx;
  a.window = p.window;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.sinks = raw_or_null(p.sinks);
  // Decode rows in one launch also quantized for the wo product that reads them next (quantized_output).
  uint8_t* q8 = chunk_rows == rows && cuda::attention_quantizes(rows, kv.head_dim)
                    ? quantized_output(BA::raw(out), rows, hrow)
                    : nullptr;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r0);
    const int32_t* pos0_device = graph_.dynamic_int(pos0 + static_cast<int>(r0));
    cuda::launch_attention(BA::raw(kv.k), BA::raw(kv.v), BA::raw(q) + r0 * hrow, n,
                           pos0 + static_cast<int>(r0), pos0_device, a, BA::raw(out) + r0 * hrow, scores, q8,
                           as_stream(stream_));
  }
}

void CudaBackend::delta_net_conv(Buf<const float> u, int64_t rows, int64_t channels, Buf<const float> conv_w,
                                 int taps, Buf<float> state, Buf<float> y) {
  const auto timer = timed({"delta_net_conv"});
  if (taps < 2 || taps > 64) fail("delta-net conv: {} taps is out of range (2..{})", taps, 64);
  if (rows <= 0 || channels <= 0) return;
  need(u, rows * channels, "delta_net_conv input");
  need(conv_w, channels * taps, "delta_net_conv weights");
  need(state, (taps - 1) * channels, "delta_net_conv state");
  need(y, rows * channels, "delta_net_conv output");
  if (skip_op("delta_net_conv", BA::raw(y), rows, channels)) return;
  cuda::launch_delta_net_conv(BA::raw(u), rows, channels, BA::raw(conv_w), taps, BA::raw(state), BA::raw(y),
                              as_stream(stream_));
}

void CudaBackend::gated_delta_net(const DeltaNetParams& p, Buf<const float> qkv, Buf<const float> alpha,
                                  Buf<const float> beta, int64_t rows, Buf<float> state, Buf<float> out) {
  const auto timer = timed({"gated_delta_net"});
  const int64_t nk = p.n_k_heads, nv = p.n_v_heads, d = p.head_dim;
  if (d < 1 || d > 512) fail("gated delta-net: head size {} is out of range (1..{})", d, 512);
  if (nk < 1 || nv < 1 || nv % nk != 0)
    fail(
        "gated delta-net: {} value heads over {} key heads of {} values: value heads must be a positive "
        "multiple of key heads",
        nv, nk, d);
  if (rows <= 0) return;
  need(qkv, rows * (2 * nk + nv) * d, "gated_delta_net qkv");
  need(alpha, rows * nv, "gated_delta_net alpha");
  need(beta, rows * nv, "gated_delta_net beta");
  need(p.dt_bias, nv, "gated_delta_net dt_bias");
  need(p.ssm_a, nv, "gated_delta_net ssm_a");
  need(state, nv * d * d, "gated_delta_net state");
  need(out, rows * nv * d, "gated_delta_net output");
  if (skip_op("gated_delta_net", BA::raw(out), rows, nv * d)) return;
  cuda::DeltaNetArgs a{};
  a.n_k = p.n_k_heads;
  a.n_v = p.n_v_heads;
  a.head_dim = p.head_dim;
  a.eps = p.eps;
  a.out_scale = 1.0f / std::sqrt(static_cast<float>(d));
  a.dt_bias = BA::raw(p.dt_bias);
  a.ssm_a = BA::raw(p.ssm_a);
  cuda::launch_gated_delta_net(a, BA::raw(qkv), BA::raw(alpha), BA::raw(beta), rows, BA::raw(state),
                               BA::raw(out), as_stream(stream_));
}

void CudaBackend::mul_sigmoid(Buf<float> x, Buf<const float> gate, int64_t rows, int64_t n, int64_t gate_n) {
  const auto timer = timed({"mul_sigmoid"});
  if (gate_n != 1 && gate_n != n) fail("mul_sigmoid: a gate of {} values per row of {}", gate_n, n);
  need(x, rows * n, "mul_sigmoid x");
  need(gate, rows * gate_n, "mul_sigmoid gate");
  // The gate's width is in the signature (negated for a one-value gate): a graph recorded with one width is
  // never replayed for the other.
  if (skip_op("mul_sigmoid", BA::raw(x), rows, gate_n == 1 ? -n : n)) return;
  cuda::launch_mul_sigmoid(BA::raw(x), BA::raw(gate), rows, n, gate_n, as_stream(stream_));
}

void CudaBackend::short_conv(Buf<const float> bcx, int64_t rows, int64_t n, Buf<const float> conv_w,
                             int l_cache, Buf<float> state, Buf<float> y) {
  const auto timer = timed({"short_conv"});
  if (l_cache < 2 || l_cache > 64) fail("short conv: {} taps is out of range (2..{})", l_cache, 64);
  if (n <= 0) return;
  need(bcx, rows * 3 * n, "short_conv input");
  need(conv_w, n * l_cache, "short_conv weights");
  need(state, (l_cache - 1) * n, "short_conv state");
  need(y, rows * n, "short_conv output");
  if (skip_op("short_conv", BA::raw(y), rows, n)) return;
  // Decode rows also quantized for the out_proj that reads them next (quantized_output).
  uint8_t* q = cuda::short_conv_quantizes(rows, n) ? quantized_output(BA::raw(y), rows, n) : nullptr;
  cuda::launch_short_conv(BA::raw(bcx), rows, n, BA::raw(conv_w), l_cache, BA::raw(state), BA::raw(y), q,
                          as_stream(stream_));
}

void CudaBackend::swiglu(Buf<const float> gate, Buf<const float> up, int64_t n, Buf<float> y) {
  const auto timer = timed({"swiglu"});
  need(gate, n, "swiglu gate");
  need(up, n, "swiglu up");
  need(y, n, "swiglu output");
  if (skip_op("swiglu", BA::raw(y), n, 0)) return;
  cuda::launch_swiglu(BA::raw(gate), BA::raw(up), n, BA::raw(y), as_stream(stream_));
}

void CudaBackend::add(Buf<float> x, Buf<const float> y, int64_t n) {
  const auto timer = timed({"add"});
  need(x, n, "add x");
  need(y, n, "add y");
  if (skip_op("add", BA::raw(x), n, 0)) return;
  cuda::launch_add(BA::raw(x), BA::raw(y), n, as_stream(stream_));
}

void CudaBackend::add_bias_rows(Buf<float> x, Buf<const float> bias, int64_t rows, int64_t n) {
  const auto timer = timed({"add_bias_rows"});
  need(x, rows * n, "add_bias_rows x");
  need(bias, n, "add_bias_rows bias");
  if (skip_op("add_bias_rows", BA::raw(x), rows, n)) return;
  cuda::launch_add_bias_rows(BA::raw(x), BA::raw(bias), rows, n, as_stream(stream_));
}

// The scalar goes into the step's signature (its bits): a replay of a graph captured with another value is
// refused rather than run with the old one.
void CudaBackend::scale(Buf<float> x, int64_t n, float s) {
  const auto timer = timed({"scale"});
  need(x, n, "scale x");
  if (skip_op("scale", BA::raw(x), n, std::bit_cast<uint32_t>(s))) return;
  cuda::launch_scale(BA::raw(x), n, s, as_stream(stream_));
}

void CudaBackend::mul_rows(Buf<float> x, Buf<const float> w, int64_t rows, int64_t n) {
  const auto timer = timed({"mul_rows"});
  need(x, rows * n, "mul_rows x");
  need(w, n, "mul_rows weight");
  if (skip_op("mul_rows", BA::raw(x), rows, n)) return;
  cuda::launch_mul_rows(BA::raw(x), BA::raw(w), rows, n, as_stream(stream_));
}

void CudaBackend::softcap(Buf<float> x, int64_t n, float cap) {
  const auto timer = timed({"softcap"});
  need(x, n, "softcap x");
  if (skip_op("softcap", BA::raw(x), n, std::bit_cast<uint32_t>(cap))) return;
  cuda::launch_softcap(BA::raw(x), n, 1.0f / cap, cap, as_stream(stream_));
}

void CudaBackend::route(const RouterParams& p, Buf<const float> logits, int64_t rows, Buf<int32_t> ids,
                        Buf<float> weights) {
  const auto timer = timed({"route"});
  constexpr int kMaxExperts = 4096;
  if (p.n_expert <= 0 || p.n_expert > kMaxExperts || p.k <= 0 || p.k > p.n_expert)
    fail("router: cannot choose {} of {} experts (at most {})", p.k, p.n_expert, kMaxExperts);
  if (rows <= 0) return;
  need(logits, rows * p.n_expert, "route logits");
  need(ids, rows * p.k, "route ids");
  need(weights, rows * p.k, "route weights");
  if (p.selection_bias) need(p.selection_bias, p.n_expert, "route selection bias");
  if (skip_op("route", BA::raw(ids), rows, p.k)) return;
  cuda::launch_route(route_args(p), BA::raw(logits), rows, BA::raw(ids), BA::raw(weights),
                     as_stream(stream_));
}

void CudaBackend::norm_route(const RouterParams& p, Buf<const float> x, int64_t rows, int64_t n,
                             Buf<const float> norm, float eps, const Weight& router, Buf<uint8_t> scratch,
                             Buf<float> xn, Buf<float> logits, Buf<int32_t> ids, Buf<float> weights) {
  // One launch for decode-sized batches with an F32 router (the lfm2moe, qwen3moe, hy_v3 and qwen35moe
  // files); anything else, and every bad argument, goes through the three ops and their checks.
  if (router.type != GgmlType::F32 || router.packed() || !router.data || router.n_in != n ||
      router.n_out != p.n_expert || p.k <= 0 || p.k > p.n_expert ||
      !cuda::norm_route_fused(rows, n, p.n_expert, p.k)) {
    rms_norm(x, rows, n, norm, eps, xn);
    matmul(router, xn, rows, logits, scratch);
    route(p, logits, rows, ids, weights);
    return;
  }
  const auto timer = timed({"norm_route", "f32", p.n_expert, n, rows});
  need(x, rows * n, "norm_route input");
  need(xn, rows * n, "norm_route normed output");
  if (norm) need(norm, n, "norm_route norm weight");
  need(logits, rows * p.n_expert, "norm_route logits");
  need(ids, rows * p.k, "norm_route ids");
  need(weights, rows * p.k, "norm_route weights");
  if (p.selection_bias) need(p.selection_bias, p.n_expert, "norm_route selection bias");
  if (skip_op("norm_route", BA::raw(ids), rows, p.k)) return;
  if (!route_counter_.ptr) {
    grow(route_counter_, sizeof(unsigned), "norm_route counter");
    cuda::check_cuda(cudaMemsetAsync(route_counter_.ptr, 0, sizeof(unsigned), as_stream(stream_)),
                     "cudaMemsetAsync");
  }
  cuda::NormRouteArgs a{};
  a.x = BA::raw(x);
  a.rows = rows;
  a.n = n;
  a.norm = raw_or_null(norm);
  a.eps = eps;
  a.router = static_cast<const float*>(router.data);
  a.xn = BA::raw(xn);
  a.logits = BA::raw(logits);
  a.ids = BA::raw(ids);
  a.weights = BA::raw(weights);
  a.route = route_args(p);
  a.counter = static_cast<unsigned*>(route_counter_.ptr);
  // The normed row also as Q8_0 for the routed gate/up that reads it next (quantized_output).
  a.xq = cuda::norm_route_quantizes(rows, n, p.n_expert) ? quantized_output(BA::raw(xn), rows, n) : nullptr;
  cuda::launch_norm_route(a, as_stream(stream_));
}

void CudaBackend::moe_combine_add(Buf<const float> expert_out, Buf<const float> weights, int64_t rows, int k,
                                  int64_t n, Buf<float> x) {
  const auto timer = timed({"moe_combine_add"});
  if (rows <= 0) return;
  need(expert_out, rows * k * n, "moe_combine_add expert outputs");
  need(weights, rows * k, "moe_combine_add weights");
  need(x, rows * n, "moe_combine_add residual");
  if (skip_op("moe_combine_add", BA::raw(x), rows, k * n)) return;
  cuda::launch_moe_combine_add(BA::raw(expert_out), BA::raw(weights), rows, k, n, BA::raw(x),
                               as_stream(stream_));
}

}  // namespace df::backend

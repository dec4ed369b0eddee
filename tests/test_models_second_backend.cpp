// The seam between the models and the backends: a model loaded with a second Backend implementation — one
// that is not the CPU backend but forwards every op to one through the interface, counting the calls — gives
// the same bits as the model on the default backend, for every golden architecture; every op the model
// needs went through the interface (nothing reached a concrete backend another way); and every operand of
// every op was memory that backend handed out (no host array of the model's own reached an op).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "backend/backend_factory.h"
#include "backend/buffer_access.h"
#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/model.h"

namespace df::models {
namespace {

// Forwards every op to an inner backend, counting the calls, and checks that every buffer and weight an op
// is handed lies inside memory that came from this backend (alloc or upload_weights): model code can name
// backend memory only through the views the backend gave it.
class ForwardingBackend final : public backend::Backend {
 public:
  explicit ForwardingBackend(std::shared_ptr<backend::Backend> inner) : inner_(std::move(inner)) {}
  std::map<std::string, int> calls;
  std::map<std::string, int> foreign;  // op -> operands outside this backend's memory

  std::string_view name() const override { return "forwarding"; }
  int n_threads() const override { return inner_->n_threads(); }
  bool reads_host_memory() const override { return inner_->reads_host_memory(); }

  backend::DeviceBuffer alloc(size_t bytes, const char* what) override {
    backend::DeviceBuffer b = inner_->alloc(bytes, what);
    remember(backend::BufferAccess::data(b), b.bytes());
    return b;
  }
  void upload(backend::Buf<uint8_t> dst, const void* src, size_t bytes) override {
    ++calls["upload"];
    owned(dst, "upload");
    inner_->upload(dst, src, bytes);
  }
  void download(void* dst, backend::Buf<const uint8_t> src, size_t bytes) override {
    ++calls["download"];
    owned(src, "download");
    inner_->download(dst, src, bytes);
  }
  void copy(backend::Buf<uint8_t> dst, backend::Buf<const uint8_t> src, size_t bytes) override {
    owned(dst, "copy");
    owned(src, "copy");
    inner_->copy(dst, src, bytes);
  }
  void fill_zero(backend::Buf<uint8_t> dst, size_t bytes) override {
    owned(dst, "fill_zero");
    inner_->fill_zero(dst, bytes);
  }
  using Backend::copy;
  using Backend::download;
  using Backend::fill_zero;
  using Backend::upload;

  quant::RowPacking preferred_packing(GgmlType type, int64_t n_out) const override {
    return inner_->preferred_packing(type, n_out);
  }
  std::unique_ptr<backend::RecordSlots> make_record_slots(int n_slots, size_t record_bytes) override {
    auto slots = inner_->make_record_slots(n_slots, record_bytes);
    remember(slots->part(0, 0), static_cast<size_t>(n_slots) * record_bytes);
    return slots;
  }
  backend::UploadedWeights upload_weights(const backend::WeightSource& src) override {
    backend::UploadedWeights w = inner_->upload_weights(src);
    remember(backend::BufferAccess::data(w.memory), w.memory.bytes());
    return w;
  }
  bool supports_matmul(GgmlType w) const override { return inner_->supports_matmul(w); }
  size_t matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const override {
    return inner_->matmul_scratch_bytes(w, n_in, rows);
  }
  void matmul(const backend::Weight& w, backend::Buf<const float> x, int64_t rows, backend::Buf<float> y,
              backend::Buf<uint8_t> scratch) override {
    ++calls["matmul"];
    owned(w, "matmul");
    owned(x, "matmul");
    owned(y, "matmul");
    owned(scratch, "matmul");
    inner_->matmul(w, x, rows, y, scratch);
  }
  void matmul_add(const backend::Weight& w, backend::Buf<const float> x, int64_t rows, backend::Buf<float> y,
                  backend::Buf<float> acc, backend::Buf<uint8_t> scratch) override {
    ++calls["matmul_add"];
    owned(w, "matmul_add");
    owned(x, "matmul_add");
    owned(y, "matmul_add");
    owned(acc, "matmul_add");
    owned(scratch, "matmul_add");
    inner_->matmul_add(w, x, rows, y, acc, scratch);
  }
  size_t max_matmul_tasks() const override { return inner_->max_matmul_tasks(); }
  void matmul_many(std::span<const backend::MatmulTask> tasks, int64_t rows) override {
    ++calls["matmul_many"];
    for (const auto& t : tasks) {
      owned(t.w, "matmul_many");
      owned(t.x, "matmul_many");
      owned(t.y, "matmul_many");
    }
    inner_->matmul_many(tasks, rows);
  }
  void ffn(std::span<const backend::FfnTask> ffns, const backend::ActivationParams& act,
           backend::Buf<const float> x, int64_t x_rows, backend::Buf<float> out) override {
    ++calls["ffn"];
    for (const auto& f : ffns) {
      for (const auto* w : {&f.gate, &f.up, &f.down}) owned(*w, "ffn");
      for (const auto& b : {f.gate_bias, f.up_bias, f.down_bias}) owned(b, "ffn");
      owned(f.in_rows, "ffn");
      owned(f.out_rows, "ffn");
    }
    owned(x, "ffn");
    owned(out, "ffn");
    inner_->ffn(ffns, act, x, x_rows, out);
  }
  // Claims the device-routed expert path for decode-sized batches (as the CUDA backend does), so that the
  // models take it here and its bits are compared with the default backend's host-grouped path.
  int64_t max_routed_tokens() const override { return 8; }
  void routed_ffn(const backend::RoutedExperts& ex, const backend::ActivationParams& act,
                  backend::Buf<const int32_t> ids, int64_t T, int k, backend::Buf<const float> x,
                  backend::Buf<float> out) override {
    ++calls["routed_ffn"];
    for (const auto* s : {&ex.gate, &ex.up, &ex.down}) owned(s->first, "routed_ffn");
    owned(ex.down_scale, "routed_ffn");
    owned(ids, "routed_ffn");
    owned(x, "routed_ffn");
    owned(out, "routed_ffn");
    inner_->routed_ffn(ex, act, ids, T, k, x, out);
  }
  void routed_ffn_add(const backend::RoutedExperts& ex, const backend::ActivationParams& act,
                      backend::Buf<const int32_t> ids, backend::Buf<const float> weights, int64_t T, int k,
                      backend::Buf<const float> x, backend::Buf<float> out,
                      backend::Buf<float> acc) override {
    ++calls["routed_ffn_add"];
    for (const auto* s : {&ex.gate, &ex.up, &ex.down}) owned(s->first, "routed_ffn_add");
    owned(ex.down_scale, "routed_ffn_add");
    owned(ids, "routed_ffn_add");
    owned(weights, "routed_ffn_add");
    owned(x, "routed_ffn_add");
    owned(out, "routed_ffn_add");
    owned(acc, "routed_ffn_add");
    inner_->routed_ffn_add(ex, act, ids, weights, T, k, x, out, acc);
  }
  void get_rows(const backend::Weight& table, backend::Buf<const int32_t> ids, int64_t n,
                backend::Buf<float> out) override {
    ++calls["get_rows"];
    owned(table, "get_rows");
    owned(ids, "get_rows");
    owned(out, "get_rows");
    inner_->get_rows(table, ids, n, out);
  }
  void rms_norm(backend::Buf<const float> x, int64_t rows, int64_t n, backend::Buf<const float> weight,
                float eps, backend::Buf<float> y) override {
    ++calls["rms_norm"];
    owned(x, "rms_norm");
    owned(weight, "rms_norm");
    owned(y, "rms_norm");
    inner_->rms_norm(x, rows, n, weight, eps, y);
  }
  void rope(backend::Buf<float> x, int64_t rows, int n_head, int head_dim, backend::Buf<const int32_t> pos,
            const backend::RopeParams& p) override {
    ++calls["rope"];
    owned(x, "rope");
    owned(pos, "rope");
    owned(p.freq_factors, "rope");
    inner_->rope(x, rows, n_head, head_dim, pos, p);
  }
  void kv_store(const backend::KvCacheView& kv, backend::Buf<const float> k, backend::Buf<const float> v,
                int64_t rows, int pos0) override {
    ++calls["kv_store"];
    for (const auto& b : {kv.k, kv.v}) owned(b, "kv_store");
    owned(k, "kv_store");
    owned(v, "kv_store");
    inner_->kv_store(kv, k, v, rows, pos0);
  }
  size_t attention_scratch_floats(int n_ctx, int head_dim) const override {
    return inner_->attention_scratch_floats(n_ctx, head_dim);
  }
  void attention(const backend::KvCacheView& kv, backend::Buf<const float> q, int64_t rows, int pos0,
                 const backend::AttentionParams& p, backend::Buf<float> out,
                 backend::Buf<float> scratch) override {
    ++calls["attention"];
    for (const auto& b : {kv.k, kv.v}) owned(b, "attention");
    owned(q, "attention");
    owned(p.sinks, "attention");
    owned(out, "attention");
    owned(scratch, "attention");
    inner_->attention(kv, q, rows, pos0, p, out, scratch);
  }
  void short_conv(backend::Buf<const float> bcx, int64_t rows, int64_t n, backend::Buf<const float> conv_w,
                  int l_cache, backend::Buf<float> state, backend::Buf<float> y) override {
    ++calls["short_conv"];
    for (const auto& b : {bcx, conv_w}) owned(b, "short_conv");
    owned(state, "short_conv");
    owned(y, "short_conv");
    inner_->short_conv(bcx, rows, n, conv_w, l_cache, state, y);
  }
  void delta_net_conv(backend::Buf<const float> u, int64_t rows, int64_t channels,
                      backend::Buf<const float> conv_w, int taps, backend::Buf<float> state,
                      backend::Buf<float> y) override {
    ++calls["delta_net_conv"];
    for (const auto& b : {u, conv_w}) owned(b, "delta_net_conv");
    owned(state, "delta_net_conv");
    owned(y, "delta_net_conv");
    inner_->delta_net_conv(u, rows, channels, conv_w, taps, state, y);
  }
  void gated_delta_net(const backend::DeltaNetParams& p, backend::Buf<const float> qkv,
                       backend::Buf<const float> alpha, backend::Buf<const float> beta, int64_t rows,
                       backend::Buf<float> state, backend::Buf<float> out) override {
    ++calls["gated_delta_net"];
    for (const auto& b : {qkv, alpha, beta, p.dt_bias, p.ssm_a}) owned(b, "gated_delta_net");
    owned(state, "gated_delta_net");
    owned(out, "gated_delta_net");
    inner_->gated_delta_net(p, qkv, alpha, beta, rows, state, out);
  }
  void mul_sigmoid(backend::Buf<float> x, backend::Buf<const float> gate, int64_t rows, int64_t n,
                   int64_t gate_n) override {
    ++calls["mul_sigmoid"];
    owned(x, "mul_sigmoid");
    owned(gate, "mul_sigmoid");
    inner_->mul_sigmoid(x, gate, rows, n, gate_n);
  }
  void swiglu(backend::Buf<const float> gate, backend::Buf<const float> up, int64_t n,
              backend::Buf<float> y) override {
    ++calls["swiglu"];
    inner_->swiglu(gate, up, n, y);
  }
  void add(backend::Buf<float> x, backend::Buf<const float> y, int64_t n) override {
    ++calls["add"];
    owned(x, "add");
    owned(y, "add");
    inner_->add(x, y, n);
  }
  void add_bias_rows(backend::Buf<float> x, backend::Buf<const float> bias, int64_t rows,
                     int64_t n) override {
    ++calls["add_bias_rows"];
    owned(x, "add_bias_rows");
    owned(bias, "add_bias_rows");
    inner_->add_bias_rows(x, bias, rows, n);
  }
  void scale(backend::Buf<float> x, int64_t n, float s) override {
    ++calls["scale"];
    owned(x, "scale");
    inner_->scale(x, n, s);
  }
  void mul_rows(backend::Buf<float> x, backend::Buf<const float> w, int64_t rows, int64_t n) override {
    ++calls["mul_rows"];
    owned(x, "mul_rows");
    owned(w, "mul_rows");
    inner_->mul_rows(x, w, rows, n);
  }
  void softcap(backend::Buf<float> x, int64_t n, float cap) override {
    ++calls["softcap"];
    owned(x, "softcap");
    inner_->softcap(x, n, cap);
  }
  void route(const backend::RouterParams& p, backend::Buf<const float> logits, int64_t rows,
             backend::Buf<int32_t> ids, backend::Buf<float> weights) override {
    ++calls["route"];
    owned(p.selection_bias, "route");
    owned(logits, "route");
    owned(ids, "route");
    owned(weights, "route");
    inner_->route(p, logits, rows, ids, weights);
  }
  void norm_route(const backend::RouterParams& p, backend::Buf<const float> x, int64_t rows, int64_t n,
                  backend::Buf<const float> norm, float eps, const backend::Weight& router,
                  backend::Buf<uint8_t> scratch, backend::Buf<float> xn, backend::Buf<float> logits,
                  backend::Buf<int32_t> ids, backend::Buf<float> weights) override {
    ++calls["norm_route"];
    owned(p.selection_bias, "norm_route");
    owned(router, "norm_route");
    owned(x, "norm_route");
    owned(norm, "norm_route");
    owned(xn, "norm_route");
    owned(logits, "norm_route");
    owned(ids, "norm_route");
    owned(weights, "norm_route");
    owned(scratch, "norm_route");
    inner_->norm_route(p, x, rows, n, norm, eps, router, scratch, xn, logits, ids, weights);
  }
  void moe_combine_add(backend::Buf<const float> expert_out, backend::Buf<const float> weights, int64_t rows,
                       int k, int64_t n, backend::Buf<float> x) override {
    ++calls["moe_combine_add"];
    for (const auto& b : {expert_out, weights}) owned(b, "moe_combine_add");
    owned(x, "moe_combine_add");
    inner_->moe_combine_add(expert_out, weights, rows, k, n, x);
  }

 protected:
  void free_memory(void*, size_t) noexcept override {}  // every buffer is the inner backend's to free

 private:
  void remember(const void* p, size_t bytes) {
    if (p) regions_[static_cast<const uint8_t*>(p)] = bytes;
  }
  // Whether [p, p + bytes) lies inside one remembered region.
  bool inside(const uint8_t* p, size_t bytes) const {
    auto it = regions_.upper_bound(p);
    if (it == regions_.begin()) return false;
    --it;
    return p + bytes <= it->first + it->second;
  }
  template <class T>
  void owned(backend::Buf<T> b, const char* op) {
    if (b && !inside(reinterpret_cast<const uint8_t*>(backend::BufferAccess::raw(b)), b.size() * sizeof(T)))
      ++foreign[op];
  }
  void owned(const backend::Weight& w, const char* op) {
    const size_t bytes = w.row_bytes() * static_cast<size_t>(w.n_out);
    if (!inside(static_cast<const uint8_t*>(w.data), bytes)) ++foreign[op];
  }
  std::shared_ptr<backend::Backend> inner_;
  std::map<const uint8_t*, size_t> regions_;
};

// Every logit of the teacher-forced prompt in chunks of 16, then 4 decode steps on its next tokens.
std::vector<float> every_logit(Model& m, const std::vector<int32_t>& tokens) {
  const size_t V = static_cast<size_t>(m.info().n_vocab);
  auto st = m.new_state(static_cast<int>(tokens.size()));
  std::vector<float> all, logits;
  for (size_t at = 0; at + 4 < tokens.size(); at += 16) {
    const size_t n = std::min<size_t>(16, tokens.size() - 4 - at);
    logits.assign(n * V, 0.0f);
    m.forward(*st, std::span<const int32_t>(tokens).subspan(at, n), logits, true);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  for (size_t at = tokens.size() - 4; at < tokens.size(); ++at) {
    logits.assign(V, 0.0f);
    m.forward(*st, std::span<const int32_t>(tokens).subspan(at, 1), logits, false);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

class SecondBackend : public ::testing::TestWithParam<const char*> {};

TEST_P(SecondBackend, AForwardingBackendGivesTheSameBitsAndSeesEveryOp) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  const auto tokens = df::testing::golden_json(name)["teacher_forced"]["tokens"].get<std::vector<int32_t>>();
  LoadOptions two_threads;
  two_threads.n_threads = 2;
  auto plain = load_model(file, two_threads);
  auto forwarding = std::make_shared<ForwardingBackend>(backend::make_backend({"cpu", 2}));
  LoadOptions o;
  o.backend = forwarding;
  auto seamed = load_model(file, o);
  const auto want = every_logit(*plain, tokens);
  forwarding->calls.clear();  // what the forward passes (not the loading) asked for
  const auto got = every_logit(*seamed, tokens);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);

  std::vector<std::string> expected = {"get_rows",  "rms_norm", "matmul", "ffn",        "moe_combine_add",
                                       "attention", "kv_store", "rope",   "matmul_many"};
  // qwen3moe's layers add their two branches through matmul_add and routed_ffn_add alone.
  if (name != "qwen3moe-tiny") expected.push_back("add");
  // The models whose attention is qk_norm_attention (or whose mixers end in a projection added to x).
  if (name != "gpt-oss-tiny" && name.rfind("gemma4", 0) != 0) expected.push_back("matmul_add");
  // The models whose routers are a norm, a matrix and a choice ask for the three as one op.
  const bool own_router = name == "gpt-oss-tiny" || name.rfind("gemma4", 0) == 0;
  expected.push_back(own_router ? "route" : "norm_route");
  if (name.rfind("lfm2moe", 0) == 0) expected.push_back("short_conv");
  if (name == "gpt-oss-tiny") expected.push_back("add_bias_rows");
  expected.push_back("routed_ffn_add");  // the decode steps (the prompt chunks of 16 take the grouped ffn)
  expected.push_back("upload");          // token ids, positions, the experts' row lists
  expected.push_back("download");        // routing ids, logits
  for (const auto& op : expected)
    EXPECT_GT(forwarding->calls[op], 0) << op << " never went through the interface";
  for (const auto& [op, n] : forwarding->foreign)
    ADD_FAILURE() << op << " was handed " << n << " operands outside the backend's memory";
}

INSTANTIATE_TEST_SUITE_P(Golden, SecondBackend,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-tiny-f16", "qwen3moe-tiny",
                                           "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace df::models

#pragma once
// Test doubles of the model/backend seam: a Backend that forwards every op to another one while counting the
// calls and checking that every operand lies in memory this backend handed out, and the teacher-forced
// logits helper the seam tests compare.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/buffer_access.h"
#include "backend/record_slots.h"
#include "models/model.h"

namespace df::testing {

// Forwards every op to an inner backend, counting the calls, and checks that every buffer and weight an op
// is handed lies inside memory that came from this backend (alloc or upload_weights): model code can name
// backend memory only through the views the backend gave it.
class ForwardingBackend final : public backend::Backend {
 public:
  explicit ForwardingBackend(std::shared_ptr<backend::Backend> inner) : inner_(std::move(inner)) {}
  std::map<std::string, int> calls;
  std::map<std::string, int> foreign;  // op -> operands outside this backend's memory
  size_t weight_bytes = 0;             // what upload_weights() stored

  std::string_view name() const override { return "forwarding"; }
  int n_threads() const override { return inner_->n_threads(); }
  bool reads_host_memory() const override { return inner_->reads_host_memory(); }

  backend::DeviceBuffer alloc(size_t bytes, const char* what) override {
    return own(inner_->alloc(bytes, what));
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
  void queue_read_back(int slot, backend::Buf<const uint8_t> src, size_t bytes) override {
    ++calls["queue_read_back"];
    owned(src, "queue_read_back");
    inner_->queue_read_back(slot, src, bytes);
  }
  void read_back(int slot, void* dst, size_t bytes) override { inner_->read_back(slot, dst, bytes); }
  bool runs_ahead_of_host() const override { return inner_->runs_ahead_of_host(); }
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
    return std::make_unique<Slots>(*this, inner_->make_record_slots(n_slots, record_bytes));
  }
  backend::UploadedWeights upload_weights(const backend::WeightSource& src) override {
    backend::UploadedWeights w = inner_->upload_weights(src);
    weight_bytes += w.memory.bytes();
    w.memory = own(std::move(w.memory));
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
  void norm_matmul_many(backend::Buf<const float> x, int64_t rows, int64_t n,
                        backend::Buf<const float> weight, float eps, backend::Buf<float> xn,
                        std::span<const backend::MatmulTask> tasks) override {
    ++calls["norm_matmul_many"];
    owned(x, "norm_matmul_many");
    owned(weight, "norm_matmul_many");
    owned(xn, "norm_matmul_many");
    for (const auto& t : tasks) {
      owned(t.w, "norm_matmul_many");
      owned(t.x, "norm_matmul_many");
      owned(t.y, "norm_matmul_many");
    }
    inner_->norm_matmul_many(x, rows, n, weight, eps, xn, tasks);
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
  void argmax(backend::Buf<const float> x, int64_t rows, int64_t n, backend::Buf<int32_t> ids) override {
    ++calls["argmax"];
    owned(x, "argmax");
    owned(ids, "argmax");
    inner_->argmax(x, rows, n, ids);
  }
  void gather_rows(backend::Buf<const float> table, int64_t width, backend::Buf<const int32_t> ids, int64_t n,
                   backend::Buf<float> out) override {
    ++calls["gather_rows"];
    owned(table, "gather_rows");
    owned(ids, "gather_rows");
    owned(out, "gather_rows");
    inner_->gather_rows(table, width, ids, n, out);
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
  void norm_rope(std::span<const backend::NormRopeTask> tasks, int64_t rows, int head_dim, float eps,
                 backend::Buf<const int32_t> pos, const backend::RopeParams& p) override {
    ++calls["norm_rope"];
    for (const backend::NormRopeTask& t : tasks) {
      owned(t.x, "norm_rope");
      owned(t.weight, "norm_rope");
    }
    owned(pos, "norm_rope");
    owned(p.freq_factors, "norm_rope");
    inner_->norm_rope(tasks, rows, head_dim, eps, pos, p);
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
  // A buffer handed out goes: its region is forgotten and the inner backend's buffer freed.
  void free_memory(void* data, size_t) noexcept override {
    regions_.erase(static_cast<const uint8_t*>(data));
    inner_buffers_.erase(data);
  }

 private:
  // The inner backend's buffer is kept here and a buffer of this backend handed out for the same memory, so
  // that its free comes here and the regions are exactly the live ones (a region the inner backend freed
  // unseen could hide, or stand for, another backend's memory at a reused address).
  backend::DeviceBuffer own(backend::DeviceBuffer inner) {
    void* p = backend::BufferAccess::data(inner);
    const size_t bytes = inner.bytes();
    if (!p) return inner;
    regions_[static_cast<const uint8_t*>(p)] = bytes;
    inner_buffers_.insert_or_assign(p, std::move(inner));
    return backend::BufferAccess::adopt(this, p, bytes);
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
  // The inner backend's record slots, their memory a region of this backend while they live.
  class Slots final : public backend::RecordSlots {
   public:
    Slots(ForwardingBackend& owner, std::unique_ptr<backend::RecordSlots> inner)
        : owner_(owner), inner_(std::move(inner)), at_(static_cast<const uint8_t*>(inner_->part(0, 0))) {
      owner_.regions_[at_] = static_cast<size_t>(inner_->slots()) * inner_->slot_bytes();
    }
    ~Slots() override { owner_.regions_.erase(at_); }
    int slots() const override { return inner_->slots(); }
    size_t slot_bytes() const override { return inner_->slot_bytes(); }
    const void* part(int slot, size_t offset) const override { return inner_->part(slot, offset); }
    void fill(int slot, const uint8_t* host_record, std::span<const backend::RecordPart> parts) override {
      inner_->fill(slot, host_record, parts);
    }
    void use(int slot) override { inner_->use(slot); }
    bool host_done(int slot) override { return inner_->host_done(slot); }
    void wait_host_done(int slot) override { inner_->wait_host_done(slot); }
    void retire(int slot) override { inner_->retire(slot); }
    std::string describe() const override { return inner_->describe(); }

   private:
    ForwardingBackend& owner_;
    std::unique_ptr<backend::RecordSlots> inner_;
    const uint8_t* at_;
  };

  std::shared_ptr<backend::Backend> inner_;
  std::map<const uint8_t*, size_t> regions_;
  std::map<void*, backend::DeviceBuffer> inner_buffers_;
};

// Every logit of the teacher-forced prompt in chunks of 16, then 4 decode steps on its next tokens.
inline std::vector<float> every_logit(models::Model& m, const std::vector<int32_t>& tokens) {
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

}  // namespace df::testing

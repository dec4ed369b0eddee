// The seam between the models and the backends: a model loaded with a second Backend implementation — one
// that is not the CPU backend but forwards every op to one through the interface, counting the calls — gives
// the same bits as the model on the default backend, for every golden architecture; and every op the model
// needs went through the interface (nothing reached a concrete backend another way).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "backend/backend_factory.h"
#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/model.h"

namespace df::models {
namespace {

class ForwardingBackend final : public backend::Backend {
 public:
  explicit ForwardingBackend(std::shared_ptr<backend::Backend> inner) : inner_(std::move(inner)) {}
  std::map<std::string, int> calls;

  std::string_view name() const override { return "forwarding"; }
  int n_threads() const override { return inner_->n_threads(); }
  quant::RowPacking preferred_packing(GgmlType type, int64_t n_out) const override {
    return inner_->preferred_packing(type, n_out);
  }
  bool supports_matmul(GgmlType w) const override { return inner_->supports_matmul(w); }
  size_t matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const override {
    return inner_->matmul_scratch_bytes(w, n_in, rows);
  }
  void matmul(const backend::Weight& w, const float* x, int64_t rows, float* y,
              std::span<uint8_t> scratch) override {
    ++calls["matmul"];
    inner_->matmul(w, x, rows, y, scratch);
  }
  size_t max_matmul_tasks() const override { return inner_->max_matmul_tasks(); }
  void matmul_many(std::span<const backend::MatmulTask> tasks, int64_t rows) override {
    ++calls["matmul_many"];
    inner_->matmul_many(tasks, rows);
  }
  void ffn(std::span<const backend::FfnTask> ffns, const backend::ActivationParams& act, const float* x,
           int64_t x_rows, float* out) override {
    ++calls["ffn"];
    inner_->ffn(ffns, act, x, x_rows, out);
  }
  void get_rows(const backend::Weight& table, std::span<const int32_t> ids, float* out) override {
    ++calls["get_rows"];
    inner_->get_rows(table, ids, out);
  }
  void rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y) override {
    ++calls["rms_norm"];
    inner_->rms_norm(x, rows, n, weight, eps, y);
  }
  void rope(float* x, int64_t rows, int n_head, int head_dim, const int32_t* pos,
            const backend::RopeParams& p) override {
    ++calls["rope"];
    inner_->rope(x, rows, n_head, head_dim, pos, p);
  }
  void kv_store(const backend::KvCacheView& kv, const float* k, const float* v, int64_t rows,
                int pos0) override {
    ++calls["kv_store"];
    inner_->kv_store(kv, k, v, rows, pos0);
  }
  size_t attention_scratch_floats(int n_ctx, int head_dim) const override {
    return inner_->attention_scratch_floats(n_ctx, head_dim);
  }
  void attention(const backend::KvCacheView& kv, const float* q, int64_t rows, int pos0,
                 const backend::AttentionParams& p, float* out, std::span<float> scratch) override {
    ++calls["attention"];
    inner_->attention(kv, q, rows, pos0, p, out, scratch);
  }
  void short_conv(const float* bcx, int64_t rows, int64_t n, const float* conv_w, int l_cache, float* state,
                  float* y) override {
    ++calls["short_conv"];
    inner_->short_conv(bcx, rows, n, conv_w, l_cache, state, y);
  }
  void swiglu(const float* gate, const float* up, int64_t n, float* y) override {
    ++calls["swiglu"];
    inner_->swiglu(gate, up, n, y);
  }
  void add(float* x, const float* y, int64_t n) override {
    ++calls["add"];
    inner_->add(x, y, n);
  }
  void add_bias_rows(float* x, const float* bias, int64_t rows, int64_t n) override {
    ++calls["add_bias_rows"];
    inner_->add_bias_rows(x, bias, rows, n);
  }
  void route(const backend::RouterParams& p, const float* logits, int64_t rows, int32_t* ids,
             float* weights) override {
    ++calls["route"];
    inner_->route(p, logits, rows, ids, weights);
  }
  void moe_combine(const float* expert_out, const float* weights, int64_t rows, int k, int64_t n,
                   float* out) override {
    ++calls["moe_combine"];
    inner_->moe_combine(expert_out, weights, rows, k, n, out);
  }

 private:
  std::shared_ptr<backend::Backend> inner_;
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

  std::vector<std::string> expected = {"get_rows",    "rms_norm",  "matmul",   "route", "ffn",        "add",
                                       "moe_combine", "attention", "kv_store", "rope",  "matmul_many"};
  if (name.rfind("lfm2moe", 0) == 0) expected.push_back("short_conv");
  if (name == "gpt-oss-tiny") expected.push_back("add_bias_rows");
  for (const auto& op : expected)
    EXPECT_GT(forwarding->calls[op], 0) << op << " never went through the interface";
}

INSTANTIATE_TEST_SUITE_P(Golden, SecondBackend,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-tiny-f16", "qwen3moe-tiny",
                                           "gpt-oss-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace df::models

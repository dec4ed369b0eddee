// qwen3moe-specific behaviour that does not need llama.cpp's numbers: the model info read from the GGUF keys,
// routing weights that are renormalised softmax probabilities, and bad or edited files that fail with
// specific errors or fall back as llama.cpp does. What every MoE architecture shares (batching, threads,
// prefetching, the expert provider, bad calls) is in test_models_contract.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "models/model.h"
#include "models/qwen3moe.h"
#include "models_test_util.h"
#include "util/error.h"

namespace df::models {
namespace {

using test_util::expect_load_error;
using test_util::load_error;

const test_util::GoldenModel kTiny("qwen3moe-tiny", "qwen3moe");

TEST(Qwen3Moe, InfoFromTheGgufKeys) {
  auto m = load_model(kTiny.file(), {});
  const ModelInfo& i = m->info();
  EXPECT_EQ(i.arch, "qwen3moe");
  EXPECT_EQ(i.name, "qwen3moe-tiny");
  EXPECT_EQ(i.n_layer, 4);
  EXPECT_EQ(i.n_embd, 256);
  EXPECT_EQ(i.n_vocab, 2048);
  EXPECT_EQ(i.n_head, 4);
  EXPECT_EQ(i.n_head_kv, 2);
  EXPECT_EQ(i.head_dim, 64);
  EXPECT_EQ(i.n_expert, 16);
  EXPECT_EQ(i.n_expert_used, 4);
  EXPECT_EQ(i.n_ctx_train, 4096);
  EXPECT_EQ(i.moe_layers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(i.attn_layers, (std::vector<bool>{true, true, true, true}));
  EXPECT_FLOAT_EQ(i.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(i.rms_eps, 1e-6f);
  const auto& cfg = dynamic_cast<Qwen3MoeModel&>(*m).config();
  EXPECT_EQ(cfg.n_ff_exp, 128);
  EXPECT_EQ(cfg.expert_weights_scale, 0.0f);
}

// qwen3moe's weights are the softmax probabilities of the chosen experts renormalised to sum 1, in
// descending order (the selection order).
TEST(Qwen3Moe, RoutingWeightsAreRenormalisedSoftmaxInSelectionOrder) {
  test_util::expect_normalised_weights_in_selection_order(kTiny);
}

// ---- files that differ from qwen3moe-tiny in one place ----

TEST(Qwen3MoeLoad, MissingTensorsAreNamed) {
  expect_load_error(kTiny.write_variant("missing-q-norm", nullptr,
                                        [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
                                          return s.name != "blk.1.attn_q_norm.weight";
                                        }),
                    "qwen3moe: missing tensor 'blk.1.attn_q_norm.weight' (expected shape {64})");
  expect_load_error(kTiny.write_variant("missing-exps", nullptr,
                                        [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
                                          return s.name != "blk.3.ffn_up_exps.weight";
                                        }),
                    "missing tensor 'blk.3.ffn_up_exps.weight' (expected shape {256, 128, 16})");
  expect_load_error(kTiny.write_variant("missing-router", nullptr,
                                        [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
                                          return s.name != "blk.0.ffn_gate_inp.weight";
                                        }),
                    "missing tensor 'blk.0.ffn_gate_inp.weight' (expected shape {256, 16})");
}

TEST(Qwen3MoeLoad, WrongShapeAndTypeNameExpectedAndFound) {
  expect_load_error(
      kTiny.write_variant("shape", nullptr, test_util::reshaped("blk.2.attn_k.weight", {256, 64})),
      "tensor 'blk.2.attn_k.weight' has shape {256, 64}, expected {256, 128}");
  expect_load_error(
      kTiny.write_variant("type", nullptr, test_util::retyped("blk.0.ffn_norm.weight", GgmlType::F16)),
      "tensor 'blk.0.ffn_norm.weight' has type F16, expected F32");
}

TEST(Qwen3MoeLoad, KeysOutsideWhatTheEngineImplementsAreRefused) {
  expect_load_error(
      kTiny.write_variant(
          "heads", [](gguf::Writer& w) { w.set("qwen3moe.attention.head_count_kv", gguf::Value::of_u32(3)); },
          nullptr),
      "4 query heads cannot be grouped over 3 KV heads");
  expect_load_error(
      kTiny.write_variant(
          "rot", [](gguf::Writer& w) { w.set("qwen3moe.rope.dimension_count", gguf::Value::of_u32(32)); },
          nullptr),
      "qwen3moe.rope.dimension_count 32 differs from the head size 64");
  expect_load_error(
      kTiny.write_variant(
          "yarn",
          [](gguf::Writer& w) { w.set("qwen3moe.rope.scaling.type", gguf::Value::of_string("yarn")); },
          nullptr),
      "qwen3moe: rope scaling 'yarn' is not supported (none, linear)");
  expect_load_error(
      kTiny.write_variant(
          "sigmoid", [](gguf::Writer& w) { w.set("qwen3moe.expert_gating_func", gguf::Value::of_u32(2)); },
          nullptr),
      "qwen3moe.expert_gating_func is 2: qwen3moe routes with softmax (1)");
  expect_load_error(
      kTiny.write_variant(
          "used", [](gguf::Writer& w) { w.set("qwen3moe.expert_used_count", gguf::Value::of_u32(17)); },
          nullptr),
      "'qwen3moe.expert_used_count' = 17 is out of range (1..16)");
  expect_load_error(
      kTiny.write_variant("no-eps", nullptr, nullptr, "qwen3moe.attention.layer_norm_rms_epsilon"),
      "missing GGUF key 'qwen3moe.attention.layer_norm_rms_epsilon'");
}

// Without expert_feed_forward_length llama.cpp takes feed_forward_length / expert_used_count (512 / 4).
TEST(Qwen3MoeLoad, ExpertWidthFallsBackToFeedForwardLengthOverK) {
  const auto path = kTiny.write_variant("no-ff-exp", nullptr, nullptr, "qwen3moe.expert_feed_forward_length");
  const auto f = gguf::File::open(path);
  EXPECT_EQ(qwen3moe_config(f).n_ff_exp, 128);
  const auto wrong = kTiny.write_variant(
      "no-ff-exp-wrong",
      [](gguf::Writer& w) { w.set("qwen3moe.feed_forward_length", gguf::Value::of_u32(1024)); }, nullptr,
      "qwen3moe.expert_feed_forward_length");
  expect_load_error(wrong,
                    "tensor 'blk.0.ffn_gate_exps.weight' has shape {256, 128, 16}, expected {256, 256, 16}");
}

// expert_weights_scale multiplies the renormalised weights (llama.cpp applies it when not 0 and not 1).
TEST(Qwen3MoeLoad, ExpertWeightsScaleIsApplied) {
  const auto path = kTiny.write_variant(
      "scale", [](gguf::Writer& w) { w.set("qwen3moe.expert_weights_scale", gguf::Value::of_f32(2.5f)); },
      nullptr);
  const auto f = gguf::File::open(path);
  auto m = load_model(f, {});
  const int32_t tok[] = {5, 9};
  auto st = m->new_state(2);
  std::vector<float> logits(static_cast<size_t>(m->info().n_vocab));
  ForwardCapture cap;
  m->forward(*st, tok, logits, false, &cap);
  const int K = m->info().n_expert_used;
  ASSERT_EQ(cap.expert_weights.size(), m->info().moe_layers.size() * 2u * static_cast<size_t>(K));
  for (size_t r = 0; r < cap.expert_weights.size() / static_cast<size_t>(K); ++r) {
    double sum = 0;
    for (int j = 0; j < K; ++j)
      sum += cap.expert_weights[r * static_cast<size_t>(K) + static_cast<size_t>(j)];
    EXPECT_NEAR(sum, 2.5, 1e-5);
  }
}

// Without `output.weight` the head is token_embd (llama.cpp's TENSOR_DUPLICATED fallback): the logits are
// bit for bit those of a file whose output.weight is a copy of token_embd (same type, same bytes), and differ
// from the file's own head.
TEST(Qwen3MoeLoad, MissingOutputFallsBackToTheTokenEmbedding) {
  const auto tied_path = kTiny.write_variant(
      "tied", nullptr, [](gguf::TensorSpec& s, std::vector<uint8_t>&) { return s.name != "output.weight"; });
  const gguf::TensorInfo* embd = kTiny.file().find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  std::vector<uint8_t> embd_bytes(embd->nbytes);
  kTiny.file().read_tensor(*embd, embd_bytes.data());
  const auto copy_path =
      kTiny.write_variant("embd-as-output", nullptr, [&](gguf::TensorSpec& s, std::vector<uint8_t>& bytes) {
        if (s.name == "output.weight") {
          s.type = embd->type;
          s.ne = {embd->ne[0], embd->ne[1]};
          bytes = embd_bytes;
        }
        return true;
      });
  const auto tied_file = gguf::File::open(tied_path), copy_file = gguf::File::open(copy_path);
  auto tied = load_model(tied_file, {});
  auto copied = load_model(copy_file, {});
  auto untied = load_model(kTiny.file(), {});
  const int32_t tok[] = {3, 1, 4, 1, 5};
  const size_t V = static_cast<size_t>(tied->info().n_vocab);
  std::vector<float> a(5 * V), b(5 * V), c(5 * V);
  auto sa = tied->new_state(8), sb = copied->new_state(8), sc = untied->new_state(8);
  tied->forward(*sa, tok, a, true);
  copied->forward(*sb, tok, b, true);
  untied->forward(*sc, tok, c, true);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
      << "the tied head is not token_embd";
  size_t differing = 0;
  for (size_t i = 0; i < a.size(); ++i) differing += a[i] != c[i];
  EXPECT_GT(differing, a.size() / 2) << "the tied head looks like the file's own output.weight";
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace df::models

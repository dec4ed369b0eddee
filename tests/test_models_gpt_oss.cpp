// gpt-oss-specific behaviour that does not need llama.cpp's numbers: the model info read from the GGUF keys
// (sliding window, yarn rope), routing weights that are a softmax over the chosen experts, the window masking
// exactly the keys older than its size, and bad files that fail with specific errors. What every MoE
// architecture shares (batching across the window, threads, prefetching, the expert provider, bad calls) is
// in test_models_contract.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "models/gpt_oss.h"
#include "models/model.h"
#include "models_test_util.h"
#include "util/error.h"

namespace df::models {
namespace {

using test_util::expect_load_error;
using test_util::load_error;

const test_util::GoldenModel kTiny("gpt-oss-tiny", "gpt-oss");

TEST(GptOss, InfoFromTheGgufKeys) {
  auto m = load_model(kTiny.file(), {});
  const ModelInfo& i = m->info();
  EXPECT_EQ(i.arch, "gpt-oss");
  EXPECT_EQ(i.name, "gpt-oss-tiny");
  EXPECT_EQ(i.n_layer, 4);
  EXPECT_EQ(i.n_embd, 256);
  EXPECT_EQ(i.n_vocab, 2048);
  EXPECT_EQ(i.n_head, 4);
  EXPECT_EQ(i.n_head_kv, 2);
  EXPECT_EQ(i.head_dim, 64);
  EXPECT_EQ(i.n_expert, 16);
  EXPECT_EQ(i.n_expert_used, 4);
  EXPECT_EQ(i.n_ctx_train, 131072);
  EXPECT_EQ(i.moe_layers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(i.attn_layers, (std::vector<bool>{true, true, true, true}));
  const GptOssConfig& c = dynamic_cast<GptOssModel&>(*m).config();
  EXPECT_EQ(c.n_swa, 16);
  EXPECT_EQ(c.swa, (std::vector<bool>{true, false, true, false}));  // even layers slide
  EXPECT_EQ(c.n_ff_exp, 128);
  EXPECT_FLOAT_EQ(c.eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope.freq_base, 150000.0f);
  EXPECT_FLOAT_EQ(c.rope.freq_scale, 1.0f / 32.0f);
  EXPECT_EQ(c.rope.ext_factor, 1.0f);
  EXPECT_EQ(c.rope.n_ctx_orig, 4096);
  EXPECT_EQ(c.rope.n_rot, 64);
  // ggml multiplies attn_factor by (1 + 0.1 ln 32) again, for a net magnitude of 1 + 0.1 ln 32.
  EXPECT_NEAR(c.rope.attn_factor * (1.0 + 0.1 * std::log(32.0)), 1.0 + 0.1 * std::log(32.0), 1e-6);
  EXPECT_FLOAT_EQ(c.rope_swa.freq_base, c.rope.freq_base);
}

// gpt-oss's weights are a softmax over the k chosen (biased) router logits: positive, summing to 1, in
// descending order (the selection order), k distinct experts.
TEST(GptOss, RoutingWeightsAreASoftmaxOverTheChosenInSelectionOrder) {
  test_util::expect_normalised_weights_in_selection_order(kTiny);
}

// ---- files that differ from gpt-oss-tiny in one place ----

TEST(GptOssLoad, MissingTensorsAreNamed) {
  const auto without = [](const std::string& name) {
    return [name](gguf::TensorSpec& s, std::vector<uint8_t>&) { return s.name != name; };
  };
  expect_load_error(kTiny.write_variant("missing-sinks", nullptr, without("blk.2.attn_sinks.weight")),
                    "gpt-oss: missing tensor 'blk.2.attn_sinks.weight' (expected shape {4})");
  expect_load_error(kTiny.write_variant("missing-q-bias", nullptr, without("blk.0.attn_q.bias")),
                    "missing tensor 'blk.0.attn_q.bias' (expected shape {256})");
  expect_load_error(kTiny.write_variant("missing-exp-bias", nullptr, without("blk.1.ffn_down_exps.bias")),
                    "missing tensor 'blk.1.ffn_down_exps.bias' (expected shape {256, 16})");
  expect_load_error(kTiny.write_variant("missing-exps", nullptr, without("blk.3.ffn_gate_exps.weight")),
                    "missing tensor 'blk.3.ffn_gate_exps.weight' (expected shape {256, 128, 16})");
  // gpt-oss's head is never tied to the embedding.
  expect_load_error(kTiny.write_variant("missing-output", nullptr, without("output.weight")),
                    "missing tensor 'output.weight' (expected shape {256, 2048})");
}

TEST(GptOssLoad, WrongShapeAndTypeNameExpectedAndFound) {
  expect_load_error(
      kTiny.write_variant("shape", nullptr, test_util::reshaped("blk.1.ffn_up_exps.bias", {128, 8})),
      "tensor 'blk.1.ffn_up_exps.bias' has shape {128, 8}, expected {128, 16}");
  expect_load_error(
      kTiny.write_variant("type", nullptr, test_util::retyped("blk.3.attn_sinks.weight", GgmlType::F16)),
      "tensor 'blk.3.attn_sinks.weight' has type F16, expected F32");
}

TEST(GptOssLoad, KeysOutsideWhatTheEngineImplementsAreRefused) {
  const auto with = [](const char* k, gguf::Value v) { return [k, v](gguf::Writer& w) { w.set(k, v); }; };
  expect_load_error(
      kTiny.write_variant("heads", with("gpt-oss.attention.head_count_kv", gguf::Value::of_u32(3)), nullptr),
      "4 query heads cannot be grouped over 3 KV heads");
  expect_load_error(
      kTiny.write_variant("rot", with("gpt-oss.rope.dimension_count", gguf::Value::of_u32(32)), nullptr),
      "gpt-oss.rope.dimension_count 32 differs from the head size 64");
  expect_load_error(
      kTiny.write_variant("scaling", with("gpt-oss.rope.scaling.type", gguf::Value::of_string("longrope")),
                          nullptr),
      "gpt-oss: rope scaling 'longrope' is not supported (none, linear, yarn)");
  expect_load_error(
      kTiny.write_variant("gating", with("gpt-oss.expert_gating_func", gguf::Value::of_u32(1)), nullptr),
      "gpt-oss.expert_gating_func is 1");
  expect_load_error(kTiny.write_variant(
                        "window", with("gpt-oss.attention.sliding_window", gguf::Value::of_u32(0)), nullptr),
                    "'gpt-oss.attention.sliding_window' = 0 is out of range");
  expect_load_error(kTiny.write_variant("no-window", nullptr, nullptr, "gpt-oss.attention.sliding_window"),
                    "missing GGUF key 'gpt-oss.attention.sliding_window'");
  expect_load_error(
      kTiny.write_variant("no-eps", nullptr, nullptr, "gpt-oss.attention.layer_norm_rms_epsilon"),
      "missing GGUF key 'gpt-oss.attention.layer_norm_rms_epsilon'");
  expect_load_error(
      kTiny.write_variant("factor", with("gpt-oss.rope.scaling.factor", gguf::Value::of_f32(-2.0f)), nullptr),
      "gpt-oss.rope.scaling.factor = -2 must be positive");
}

// A sliding_window_pattern key changes which layers slide (llama.cpp: layer i slides iff i % P < P - 1).
TEST(GptOssLoad, SlidingWindowPatternKeySetsTheSlidingLayers) {
  const auto path = kTiny.write_variant(
      "pattern",
      [](gguf::Writer& w) { w.set("gpt-oss.attention.sliding_window_pattern", gguf::Value::of_u32(4)); },
      nullptr);
  const auto f = gguf::File::open(path);
  EXPECT_EQ(gpt_oss_config(f).swa, (std::vector<bool>{true, true, true, false}));
}

// A window as large as the sequence makes the sliding layers full-attention layers: the logits then change
// only where some key is older than the window.
TEST(GptOssLoad, TheWindowMasksExactlyTheKeysOlderThanItsSize) {
  const auto path = kTiny.write_variant(
      "wide", [](gguf::Writer& w) { w.set("gpt-oss.attention.sliding_window", gguf::Value::of_u32(4096)); },
      nullptr);
  const auto f = gguf::File::open(path);
  auto wide = load_model(f, {});
  auto narrow = load_model(kTiny.file(), {});
  const auto tokens = kTiny.teacher_forced_tokens();
  const std::span<const int32_t> prompt(tokens.data(), 24);
  const size_t V = 2048;
  std::vector<float> a(prompt.size() * V), b(prompt.size() * V);
  auto sa = wide->new_state(24), sb = narrow->new_state(24);
  wide->forward(*sa, prompt, a, true);
  narrow->forward(*sb, prompt, b, true);
  for (size_t p = 0; p < prompt.size(); ++p) {
    const bool same = std::equal(a.begin() + p * V, a.begin() + (p + 1) * V, b.begin() + p * V);
    EXPECT_EQ(same, p < 16) << "position " << p;  // window 16: position 16 is the first to lose a key
  }
}

}  // namespace
}  // namespace df::models

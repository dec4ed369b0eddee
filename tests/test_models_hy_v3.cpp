// hy_v3-specific behaviour that does not need llama.cpp's numbers: the model info read from the GGUF keys,
// the routing weights (renormalised sigmoid probabilities times expert_weights_scale, or raw ones without
// expert_weights_norm), the shared expert taking part, dense layers found by their missing router, trailing
// MTP blocks skipped, and bad or edited files that fail with specific errors. The numbers against llama.cpp
// are in test_models_hy_v3_golden.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "models/hy_v3.h"
#include "models/model.h"
#include "models_test_util.h"
#include "util/error.h"

namespace df::models {
namespace {

using test_util::expect_load_error;

const test_util::GoldenModel kTiny("hy_v3-tiny", "hy_v3");

using test_util::ForwardRun;

// The first 20 teacher-forced tokens through `path` (empty: the tiny model) in one batch.
ForwardRun run_file(const std::string& path = "") {
  return test_util::forward_teacher_forced(kTiny, 20, path);
}

TEST(HyV3, InfoFromTheGgufKeys) {
  auto m = load_model(kTiny.file(), {});
  const ModelInfo& i = m->info();
  EXPECT_EQ(i.arch, "hy_v3");
  EXPECT_EQ(i.name, "hy_v3-tiny");
  EXPECT_EQ(i.n_layer, 4);
  EXPECT_EQ(i.n_embd, 256);
  EXPECT_EQ(i.n_vocab, 2048);
  EXPECT_EQ(i.n_head, 4);
  EXPECT_EQ(i.n_head_kv, 2);
  EXPECT_EQ(i.head_dim, 64);
  EXPECT_EQ(i.n_expert, 16);
  EXPECT_EQ(i.n_expert_used, 4);
  EXPECT_EQ(i.moe_layers, (std::vector<int>{1, 2, 3}));  // layer 0 has no router: dense
  const auto& cfg = dynamic_cast<HyV3Model&>(*m).config();
  EXPECT_EQ(cfg.n_ff, 512);
  EXPECT_EQ(cfg.n_ff_exp, 128);
  EXPECT_EQ(cfg.n_ff_shexp, 128);
  EXPECT_EQ(cfg.n_nextn, 0);
  EXPECT_TRUE(cfg.weights_norm);
  EXPECT_FLOAT_EQ(cfg.expert_weights_scale, 2.826f);
  EXPECT_EQ(cfg.gating, backend::Gating::Sigmoid);
}

// With expert_weights_norm the chosen sigmoid probabilities are renormalised to 1, then scaled by
// expert_weights_scale; without it (llama.cpp's default) they are only scaled, so their sum varies.
TEST(HyV3, RoutingWeightsAreScaledAndRenormalisedOnlyWhenTheFileSaysSo) {
  const auto sums = [](const ForwardRun& r, int K) {
    std::vector<double> out;
    for (size_t row = 0; row < r.capture.expert_weights.size() / static_cast<size_t>(K); ++row) {
      double s = 0;
      for (int j = 0; j < K; ++j) s += r.capture.expert_weights[row * static_cast<size_t>(K) + size_t(j)];
      out.push_back(s);
    }
    return out;
  };
  const ForwardRun normed = run_file();
  ASSERT_EQ(normed.capture.expert_weights.size(), 3u * 20u * 4u);
  for (double s : sums(normed, 4)) EXPECT_NEAR(s, 2.826, 1e-5);

  const ForwardRun raw = run_file(kTiny.write_variant(
      "no-norm", [](gguf::Writer& w) { w.set("hy_v3.expert_weights_norm", gguf::Value::of_bool(false)); },
      nullptr));
  double lo = 1e9, hi = 0;
  for (double s : sums(raw, 4)) {
    lo = std::min(lo, s), hi = std::max(hi, s);
    EXPECT_GT(s, 0.0);
    EXPECT_LT(s, 4 * 2.826);  // k probabilities below 1, scaled
  }
  EXPECT_GT(hi - lo, 1e-3) << "the weights look renormalised";
  EXPECT_NE(std::memcmp(raw.logits.data(), normed.logits.data(), raw.logits.size() * sizeof(float)), 0);
}

// The shared expert takes part in every MoE layer: zeroing one layer's shared down projection changes the
// logits, zeroing a routed expert stack's instead changes them in another way.
TEST(HyV3, TheSharedExpertAddsToEveryToken) {
  const auto zeroed = [](const char* name) {
    return [name = std::string(name)](gguf::TensorSpec& s, std::vector<uint8_t>& bytes) {
      if (s.name == name) std::fill(bytes.begin(), bytes.end(), uint8_t{0});
      return true;
    };
  };
  const ForwardRun base = run_file();
  const ForwardRun no_shared =
      run_file(kTiny.write_variant("no-shared-2", nullptr, zeroed("blk.2.ffn_down_shexp.weight")));
  size_t differing_rows = 0;
  const size_t V = 2048;
  for (size_t t = 0; t < 20; ++t)
    differing_rows += std::memcmp(base.logits.data() + t * V, no_shared.logits.data() + t * V, V * 4) != 0;
  EXPECT_EQ(differing_rows, 20u) << "the shared expert did not reach every token";
}

// llama.cpp makes a layer dense exactly when it has no router: without blk.1.ffn_gate_inp the loader wants
// layer 1's dense FFN.
TEST(HyV3Load, ALayerWithoutARouterIsDense) {
  expect_load_error(kTiny.write_variant("no-router-1", nullptr,
                                        [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
                                          return s.name != "blk.1.ffn_gate_inp.weight";
                                        }),
                    "hy_v3: missing tensor 'blk.1.ffn_gate.weight' (expected shape {256, 512})");
}

TEST(HyV3Load, MissingTensorsAreNamed) {
  expect_load_error(kTiny.write_variant("no-shexp", nullptr,
                                        [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
                                          return s.name != "blk.3.ffn_up_shexp.weight";
                                        }),
                    "missing tensor 'blk.3.ffn_up_shexp.weight' (expected shape {256, 128})");
  expect_load_error(kTiny.write_variant("no-exps", nullptr,
                                        [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
                                          return s.name != "blk.2.ffn_down_exps.weight";
                                        }),
                    "missing tensor 'blk.2.ffn_down_exps.weight' (expected shape {128, 256, 16})");
}

// exp_probs_b is optional (llama.cpp: TENSOR_NOT_REQUIRED): without it the experts are chosen by the
// probabilities alone, which picks other experts somewhere on 20 tokens x 3 layers.
TEST(HyV3Load, WithoutTheSelectionBiasTheProbabilitiesChoose) {
  const ForwardRun base = run_file();
  const ForwardRun unbiased =
      run_file(kTiny.write_variant("no-bias", nullptr, [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
        return s.name.find("exp_probs_b") == std::string::npos;
      }));
  ASSERT_EQ(unbiased.capture.expert_ids.size(), base.capture.expert_ids.size());
  EXPECT_NE(unbiased.capture.expert_ids, base.capture.expert_ids);
}

// Trailing multi-token-prediction blocks are not run: with nextn_predict_layers = 1 the last of the four
// blocks is one, so the model has three layers, and the file's blk.3 tensors are left alone.
TEST(HyV3Load, TrailingMtpBlocksAreNotRun) {
  const auto path = kTiny.write_variant(
      "nextn", [](gguf::Writer& w) { w.set("hy_v3.nextn_predict_layers", gguf::Value::of_u32(1)); }, nullptr);
  const auto f = gguf::File::open(path);
  auto m = load_model(f, {});
  EXPECT_EQ(m->info().n_layer, 3);
  EXPECT_EQ(m->info().moe_layers, (std::vector<int>{1, 2}));
  const ForwardRun three = run_file(path);
  const ForwardRun four = run_file();
  EXPECT_NE(three.logits, four.logits);
  expect_load_error(
      kTiny.write_variant(
          "nextn-all", [](gguf::Writer& w) { w.set("hy_v3.nextn_predict_layers", gguf::Value::of_u32(4)); },
          nullptr),
      "hy_v3.nextn_predict_layers 4 leaves no layer of the 4 blocks to run");
}

TEST(HyV3Load, KeysOutsideWhatTheEngineImplementsAreRefused) {
  expect_load_error(
      kTiny.write_variant(
          "gating", [](gguf::Writer& w) { w.set("hy_v3.expert_gating_func", gguf::Value::of_u32(3)); },
          nullptr),
      "hy_v3.expert_gating_func 3 is not supported (1 softmax, 2 sigmoid; 0 or absent: sigmoid)");
  expect_load_error(kTiny.write_variant("no-ff-exp", nullptr, nullptr, "hy_v3.expert_feed_forward_length"),
                    "missing GGUF key 'hy_v3.expert_feed_forward_length'");
  expect_load_error(
      kTiny.write_variant(
          "heads", [](gguf::Writer& w) { w.set("hy_v3.attention.head_count_kv", gguf::Value::of_u32(3)); },
          nullptr),
      "4 query heads cannot be grouped over 3 KV heads");
  expect_load_error(
      kTiny.write_variant(
          "yarn", [](gguf::Writer& w) { w.set("hy_v3.rope.scaling.type", gguf::Value::of_string("yarn")); },
          nullptr),
      "hy_v3: rope scaling 'yarn' is not supported (none, linear)");
}

// A gating func of 0 (or none) is sigmoid, as llama.cpp reads it: the same bits as the file's 2.
TEST(HyV3Load, GatingZeroOrAbsentIsSigmoid) {
  const ForwardRun base = run_file();
  const ForwardRun absent =
      run_file(kTiny.write_variant("no-gating", nullptr, nullptr, "hy_v3.expert_gating_func"));
  EXPECT_EQ(absent.logits, base.logits);
  const ForwardRun zero = run_file(kTiny.write_variant(
      "gating-0", [](gguf::Writer& w) { w.set("hy_v3.expert_gating_func", gguf::Value::of_u32(0)); },
      nullptr));
  EXPECT_EQ(zero.logits, base.logits);
}

}  // namespace
}  // namespace df::models

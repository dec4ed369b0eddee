// gemma4-specific behaviour that does not need llama.cpp's numbers: the per-layer config read from the GGUF
// keys (sliding and global layers with their own head sizes, KV heads, RoPE bases and rotary dims),
// K-equals-V on layers without attn_v, the final soft-capping, the layer output scale and the per-expert
// scales taking part, and the files this engine refuses. The numbers against llama.cpp are in
// test_models_gemma4_golden.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "models/gemma4.h"
#include "models/model.h"
#include "models_test_util.h"
#include "util/error.h"

namespace df::models {
namespace {

using test_util::expect_load_error;

const test_util::GoldenModel kTiny("gemma4-tiny", "gemma4");

using test_util::ForwardRun;

// The first 24 teacher-forced tokens (past the sliding window of 16) through `path` (empty: the tiny model)
// in one batch.
ForwardRun run_file(const std::string& path = "") {
  return test_util::forward_teacher_forced(kTiny, 24, path);
}

// Edits one tensor's F32 values.
test_util::TensorEdit scaled_f32(std::string name, float factor) {
  return [name = std::move(name), factor](gguf::TensorSpec& s, std::vector<uint8_t>& bytes) {
    if (s.name == name) {
      float* v = reinterpret_cast<float*>(bytes.data());
      for (size_t i = 0; i < bytes.size() / sizeof(float); ++i) v[i] *= factor;
    }
    return true;
  };
}

TEST(Gemma4, PerLayerConfigFromTheGgufKeys) {
  auto m = load_model(kTiny.file(), {});
  EXPECT_EQ(m->info().arch, "gemma4");
  EXPECT_EQ(m->info().n_layer, 4);
  EXPECT_EQ(m->info().moe_layers, (std::vector<int>{0, 1, 2, 3}));
  const auto& c = dynamic_cast<Gemma4Model&>(*m).config();
  EXPECT_EQ(c.swa, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(c.head_dim, (std::vector<int>{64, 64, 64, 128}));
  EXPECT_EQ(c.n_head_kv, (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(c.n_rot, (std::vector<int>{64, 64, 64, 128}));
  EXPECT_EQ(c.n_swa, 16);
  EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c.rope_theta_swa, 1e4f);
  EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);
  EXPECT_EQ(c.n_ff, (std::vector<int64_t>{512, 512, 512, 512}));
  EXPECT_EQ(c.n_ff_exp, 128);
}

// Soft-capping keeps every logit inside (-c, c); with the key set to 0 the same model's logits go beyond it.
TEST(Gemma4, LogitsAreSoftCapped) {
  const ForwardRun capped = run_file();
  float peak = 0;
  for (float x : capped.logits) peak = std::max(peak, std::fabs(x));
  EXPECT_LT(peak, 30.0f);
  const ForwardRun raw = run_file(kTiny.write_variant(
      "softcap-0", [](gguf::Writer& w) { w.set("gemma4.final_logit_softcapping", gguf::Value::of_f32(0)); },
      nullptr));
  float raw_peak = 0;
  for (float x : raw.logits) raw_peak = std::max(raw_peak, std::fabs(x));
  EXPECT_GT(raw_peak, peak);
  for (size_t i = 0; i < raw.logits.size(); ++i)
    ASSERT_NEAR(capped.logits[i], 30.0f * std::tanh(raw.logits[i] / 30.0f), 1e-3f) << i;
  // Without the key llama.cpp caps at 30 (its default), which is what the tiny file says.
  EXPECT_EQ(
      run_file(kTiny.write_variant("no-softcap-key", nullptr, nullptr, "gemma4.final_logit_softcapping"))
          .logits,
      capped.logits);
}

// The layer output scale and the per-expert output scales take part: doubling either changes the logits, and
// a file without them runs (both are optional in llama.cpp).
TEST(Gemma4, LayerAndExpertScalesTakePart) {
  const ForwardRun base = run_file();
  const ForwardRun layer =
      run_file(kTiny.write_variant("out-scale", nullptr, scaled_f32("blk.1.layer_output_scale.weight", 2)));
  const ForwardRun expert =
      run_file(kTiny.write_variant("down-scale", nullptr, scaled_f32("blk.2.ffn_down_exps.scale", 2)));
  EXPECT_NE(layer.logits, base.logits);
  EXPECT_NE(expert.logits, base.logits);
  const ForwardRun none =
      run_file(kTiny.write_variant("no-scales", nullptr, [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
        return s.name.find("layer_output_scale") == std::string::npos &&
               s.name.find("ffn_down_exps.scale") == std::string::npos;
      }));
  EXPECT_NE(none.logits, base.logits);
}

// Without attn_v a layer takes V from the K projection (K-equals-V): a copy of the file whose global layer
// carries an attn_v equal to its attn_k gives the same bits, and one whose attn_v differs does not.
TEST(Gemma4, KEqualsVOnLayersWithoutAttnV) {
  const gguf::File& src = kTiny.file();
  ASSERT_EQ(src.find_tensor("blk.3.attn_v.weight"), nullptr) << "the tiny model's global layer has no V";
  const auto with_v = [&](const std::string& what, bool same) {
    gguf::Writer w(src.alignment());
    for (const auto& [k, v] : src.metadata()) w.set(k, v);
    std::vector<std::vector<uint8_t>> data;
    for (const auto& t : src.tensors()) {
      gguf::TensorSpec spec{t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)};
      std::vector<uint8_t> bytes(t.nbytes);
      src.read_tensor(t, bytes.data());
      if (t.name == "blk.3.attn_k.weight") {
        std::vector<uint8_t> v = bytes;
        if (!same) std::reverse(v.begin(), v.begin() + 18);  // another first block of the first row
        w.add_tensor({"blk.3.attn_v.weight", t.type, spec.ne});
        data.push_back(std::move(v));
      }
      w.add_tensor(spec);
      data.push_back(std::move(bytes));
    }
    std::filesystem::create_directories(DF_TEST_TMP);
    const std::string path = std::string(DF_TEST_TMP) + "/gemma4-" + what + ".gguf";
    w.write(path, data);
    return path;
  };
  const ForwardRun base = run_file();
  EXPECT_EQ(run_file(with_v("v-is-k", true)).logits, base.logits);
  EXPECT_NE(run_file(with_v("v-differs", false)).logits, base.logits);
}

TEST(Gemma4Load, WhatTheEngineDoesNotImplementIsRefused) {
  expect_load_error(
      kTiny.write_variant(
          "ple",
          [](gguf::Writer& w) { w.set("gemma4.embedding_length_per_layer_input", gguf::Value::of_u32(64)); },
          nullptr),
      "per-layer embeddings (Gemma 4 E2B/E4B) are not supported");
  expect_load_error(
      kTiny.write_variant(
          "shared-kv",
          [](gguf::Writer& w) { w.set("gemma4.attention.shared_kv_layers", gguf::Value::of_u32(2)); },
          nullptr),
      "layers that reuse another layer's KV cache are not supported");
  expect_load_error(
      kTiny.write_variant(
          "kv", [](gguf::Writer& w) { w.set("gemma4.attention.value_length", gguf::Value::of_u32(64)); },
          nullptr),
      "gemma4 requires key_length == value_length (128 vs 64)");
  expect_load_error(kTiny.write_variant("no-window", nullptr, nullptr, "gemma4.attention.sliding_window"),
                    "missing GGUF key 'gemma4.attention.sliding_window'");
  expect_load_error(kTiny.write_variant("no-rope-freqs", nullptr,
                                        [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
                                          return s.name != "rope_freqs.weight";
                                        }),
                    "missing tensor 'rope_freqs.weight'");
}

}  // namespace
}  // namespace df::models

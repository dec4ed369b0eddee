// lfm2moe-specific behaviour that does not need llama.cpp's numbers: the model info read from the GGUF keys
// (hybrid shortconv/attention layers, dense layers before the MoE ones), and bad files that fail with
// specific errors. What every MoE architecture shares (batching, threads, prefetching, the expert provider,
// bad calls) is in test_models_contract.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "models/lfm2moe.h"
#include "models/model.h"
#include "models_test_util.h"
#include "util/error.h"

namespace df::models {
namespace {

using test_util::load_error;

const test_util::GoldenModel kTiny("lfm2moe-tiny", "lfm2moe");

TEST(Lfm2Moe, InfoFromTheGgufKeys) {
  auto m = load_model(kTiny.file(), {});
  const ModelInfo& i = m->info();
  EXPECT_EQ(i.arch, "lfm2moe");
  EXPECT_EQ(i.n_layer, 6);
  EXPECT_EQ(i.n_embd, 256);
  EXPECT_EQ(i.n_vocab, 2048);
  EXPECT_EQ(i.n_head, 4);
  EXPECT_EQ(i.n_head_kv, 2);
  EXPECT_EQ(i.head_dim, 64);
  EXPECT_EQ(i.n_expert, 16);
  EXPECT_EQ(i.n_expert_used, 4);
  EXPECT_EQ(i.moe_layers, (std::vector<int>{2, 3, 4, 5}));
  EXPECT_EQ(i.attn_layers, (std::vector<bool>{false, false, true, false, false, true}));
}

// ---- bad files ----

TEST(Lfm2MoeLoad, UnknownArchitectureIsRefused) {
  const auto path = kTiny.write_variant(
      "arch", [](gguf::Writer& w) { w.set("general.architecture", gguf::Value::of_string("nosucharch")); },
      nullptr);
  const std::string err = load_error(path);
  EXPECT_NE(err.find("unsupported architecture 'nosucharch' (supported: lfm2moe"), std::string::npos) << err;
}

TEST(Lfm2MoeLoad, MissingTensorIsNamed) {
  const auto path = kTiny.write_variant("missing", nullptr, [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
    return s.name != "blk.2.attn_q.weight";
  });
  const std::string err = load_error(path);
  EXPECT_NE(err.find("missing tensor 'blk.2.attn_q.weight' (expected shape {256, 256})"), std::string::npos)
      << err;
}

TEST(Lfm2MoeLoad, MissingExpertTensorIsNamed) {
  const auto path = kTiny.write_variant(
      "missing-exps", nullptr,
      [](gguf::TensorSpec& s, std::vector<uint8_t>&) { return s.name != "blk.4.ffn_down_exps.weight"; });
  const std::string err = load_error(path);
  EXPECT_NE(err.find("missing tensor 'blk.4.ffn_down_exps.weight' (expected shape {128, 256, 16})"),
            std::string::npos)
      << err;
}

TEST(Lfm2MoeLoad, WrongShapeNamesExpectedAndFound) {
  const auto path =
      kTiny.write_variant("shape", nullptr, test_util::reshaped("blk.5.attn_k_norm.weight", {32}));
  const std::string err = load_error(path);
  EXPECT_NE(err.find("tensor 'blk.5.attn_k_norm.weight' has shape {32}, expected {64}"), std::string::npos)
      << err;
}

TEST(Lfm2MoeLoad, WrongTypeNamesExpectedAndFound) {
  const auto path =
      kTiny.write_variant("type", nullptr, test_util::retyped("blk.0.attn_norm.weight", GgmlType::F16));
  const std::string err = load_error(path);
  EXPECT_NE(err.find("tensor 'blk.0.attn_norm.weight' has type F16, expected F32"), std::string::npos) << err;
}

TEST(Lfm2MoeLoad, MatmulTypeTheBackendCannotMultiply) {
  const auto path = kTiny.write_variant("i32", nullptr, [](gguf::TensorSpec& s, std::vector<uint8_t>& bytes) {
    if (s.name == "blk.1.shortconv.out_proj.weight") {
      s.type = GgmlType::I32;
      bytes.assign(256 * 256 * 4, 0);
    }
    return true;
  });
  const std::string err = load_error(path);
  EXPECT_NE(
      err.find(
          "tensor 'blk.1.shortconv.out_proj.weight' has type I32, which the cpu backend cannot multiply"),
      std::string::npos)
      << err;
}

TEST(Lfm2MoeLoad, GatingFunctionOtherThanSigmoidIsRefused) {
  const auto path = kTiny.write_variant(
      "softmax", [](gguf::Writer& w) { w.set("lfm2moe.expert_gating_func", gguf::Value::of_u32(1)); },
      nullptr);
  const std::string err = load_error(path);
  EXPECT_NE(err.find("expert_gating_func is 1: this engine implements sigmoid gating (2) only"),
            std::string::npos)
      << err;
}

TEST(Lfm2MoeLoad, UnevenKvHeadsAndWrongArrayLengthAreRefused) {
  const auto uneven = kTiny.write_variant(
      "kv-uneven",
      [](gguf::Writer& w) {
        w.set("lfm2moe.attention.head_count_kv", gguf::Value::of_i32s({0, 0, 2, 0, 0, 1}));
      },
      nullptr);
  std::string err = load_error(uneven);
  EXPECT_NE(err.find("attention layers with different KV head counts (1, 2)"), std::string::npos) << err;
  const auto short_array = kTiny.write_variant(
      "kv-short",
      [](gguf::Writer& w) {
        w.set("lfm2moe.attention.head_count_kv", gguf::Value::of_i32s({0, 2}));
      },
      nullptr);
  err = load_error(short_array);
  EXPECT_NE(err.find("'lfm2moe.attention.head_count_kv' has 2 entries, expected one per layer (6)"),
            std::string::npos)
      << err;
}

TEST(Lfm2MoeLoad, ScalarKvHeadCountMakesEveryLayerAttention) {
  // A scalar head_count_kv means attention everywhere: the conv layers' attention tensors are then missing.
  const auto path = kTiny.write_variant(
      "kv-scalar", [](gguf::Writer& w) { w.set("lfm2moe.attention.head_count_kv", gguf::Value::of_u32(2)); },
      nullptr);
  const std::string err = load_error(path);
  EXPECT_NE(err.find("missing tensor 'blk.0.attn_q.weight'"), std::string::npos) << err;
}

TEST(Lfm2MoeLoad, MissingRequiredKeyIsNamed) {
  const gguf::File& src = kTiny.file();
  gguf::Writer w(src.alignment());
  for (const auto& [k, v] : src.metadata())
    if (k != "lfm2moe.attention.layer_norm_rms_epsilon") w.set(k, v);
  std::vector<std::vector<uint8_t>> data;
  for (const auto& t : src.tensors()) {
    w.add_tensor({t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)});
    data.emplace_back(t.nbytes);
    src.read_tensor(t, data.back().data());
  }
  std::filesystem::create_directories(DF_TEST_TMP);
  const std::string path = std::string(DF_TEST_TMP) + "/lfm2moe-no-eps.gguf";
  w.write(path, data);
  const std::string err = load_error(path);
  EXPECT_NE(err.find("missing GGUF key 'lfm2moe.attention.layer_norm_rms_epsilon'"), std::string::npos)
      << err;
}

}  // namespace
}  // namespace df::models

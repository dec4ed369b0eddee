// qwen35moe-specific behaviour that does not need llama.cpp's numbers: the model info and layer kinds read
// from the GGUF keys (the interval rule and attention.recurrent_layers), the delta-net state carried from
// forward to forward (and copied, and reset), the sigmoid-gated shared expert, trailing MTP blocks skipped,
// and bad or edited files that fail with specific errors. The numbers against llama.cpp are in
// test_models_qwen35moe_golden.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "models/model.h"
#include "models/qwen35moe.h"
#include "models_test_util.h"
#include "util/error.h"

namespace df::models {
namespace {

using test_util::expect_load_error;
using test_util::ForwardRun;

const test_util::GoldenModel kTiny("qwen35moe-tiny", "qwen35moe");

ForwardRun run_file(const std::string& path = "") {
  return test_util::forward_teacher_forced(kTiny, 20, path);
}

std::string with_key(const std::string& what, const std::string& key, gguf::Value v) {
  return kTiny.write_variant(
      what, [&](gguf::Writer& w) { w.set(key, v); }, nullptr);
}

TEST(Qwen35Moe, InfoFromTheGgufKeys) {
  auto m = load_model(kTiny.file(), {});
  const ModelInfo& i = m->info();
  EXPECT_EQ(i.arch, "qwen35moe");
  EXPECT_EQ(i.name, "qwen35moe-tiny");
  EXPECT_EQ(i.n_layer, 4);
  EXPECT_EQ(i.n_embd, 256);
  EXPECT_EQ(i.n_vocab, 2048);
  EXPECT_EQ(i.n_expert, 16);
  EXPECT_EQ(i.n_expert_used, 4);
  EXPECT_EQ(i.moe_layers, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(i.attn_layers, (std::vector<bool>{false, false, false, true}));  // every fourth attends
  const auto& c = dynamic_cast<Qwen35MoeModel&>(*m).config();
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_rot, 16);
  EXPECT_EQ(c.conv_taps, 4);
  EXPECT_EQ(c.dn_k_heads, 2);
  EXPECT_EQ(c.dn_v_heads, 4);
  EXPECT_EQ(c.dn_head_dim, 64);
  EXPECT_EQ(c.conv_channels(), 2 * 2 * 64 + 4 * 64);
  EXPECT_EQ(c.n_ff_exp, 128);
  EXPECT_EQ(c.n_ff_shexp, 128);
  EXPECT_EQ(c.n_nextn, 0);
}

// The recurrence carries every earlier token: changing the first token changes the logits of the last one
// even though the attention layer alone would too; with the attention layer's KV untouched (a variant whose
// only attention layer is never reached is not possible), the check is on the delta-net state itself: two
// states fed the same last token after different prefixes hold different matrices.
TEST(Qwen35Moe, TheDeltaNetStateCarriesThePrefix) {
  auto m = load_model(kTiny.file(), {});
  auto tokens = kTiny.teacher_forced_tokens();
  tokens.resize(12);
  std::vector<float> a(static_cast<size_t>(m->info().n_vocab)), b(a.size());
  auto sa = m->new_state(16), sb = m->new_state(16);
  m->forward(*sa, tokens, a, false);
  auto other = tokens;
  other[0] = (other[0] + 1) % 2048;
  m->forward(*sb, other, b, false);
  EXPECT_NE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);

  // A copy continues exactly as the original; a reset state restarts from zero.
  auto sc = m->new_state(16);
  sc->copy_sequence_from(*sa);
  std::vector<float> next_a(a.size()), next_c(a.size());
  m->forward(*sa, std::span<const int32_t>(tokens).first(1), next_a, false);
  m->forward(*sc, std::span<const int32_t>(tokens).first(1), next_c, false);
  EXPECT_EQ(std::memcmp(next_a.data(), next_c.data(), a.size() * sizeof(float)), 0);

  auto fresh = m->new_state(16);
  std::vector<float> f1(a.size()), f2(a.size());
  m->forward(*fresh, tokens, f1, false);
  fresh->reset();
  m->forward(*fresh, tokens, f2, false);
  EXPECT_EQ(std::memcmp(f1.data(), a.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(f2.data(), a.data(), a.size() * sizeof(float)), 0);
}

// The shared expert is scaled by sigmoid(ffn_gate_inp_shexp · x) per token: zeroing that gate makes the
// scale 0.5 everywhere, which changes every token's logits.
TEST(Qwen35Moe, TheSharedExpertIsGatedPerToken) {
  const ForwardRun base = run_file();
  const ForwardRun half = run_file(
      kTiny.write_variant("shexp-gate-0", nullptr, [](gguf::TensorSpec& s, std::vector<uint8_t>& bytes) {
        if (s.name == "blk.1.ffn_gate_inp_shexp.weight") std::fill(bytes.begin(), bytes.end(), uint8_t{0});
        return true;
      }));
  const size_t V = 2048;
  size_t differing_rows = 0;
  for (size_t t = 0; t < 20; ++t)
    differing_rows += std::memcmp(base.logits.data() + t * V, half.logits.data() + t * V, V * 4) != 0;
  EXPECT_EQ(differing_rows, 20u);
}

// attention.recurrent_layers overrides the interval rule: making layer 0 an attention layer makes the loader
// want its attention tensors.
TEST(Qwen35MoeLoad, RecurrentLayersKeyOverridesTheInterval) {
  std::vector<gguf::Value> flags;
  for (bool r : {false, false, true, false}) flags.push_back(gguf::Value::of_bool(r));
  expect_load_error(with_key("recurrent-layers", "qwen35moe.attention.recurrent_layers",
                             gguf::Value::of_array(gguf::ValueType::BOOL, flags)),
                    "missing tensor 'blk.0.attn_q.weight' (expected shape {256, 512})");
}

TEST(Qwen35MoeLoad, AnIntervalOfTwoWantsAttentionOnLayerOne) {
  expect_load_error(with_key("interval-2", "qwen35moe.full_attention_interval", gguf::Value::of_u32(2)),
                    "missing tensor 'blk.1.attn_q.weight'");
}

TEST(Qwen35MoeLoad, DeltaNetShapesAreChecked) {
  expect_load_error(with_key("inner", "qwen35moe.ssm.inner_size", gguf::Value::of_u32(200)),
                    "qwen35moe.ssm.inner_size 200 is not time_step_rank 4 x state_size 64");
  expect_load_error(with_key("rank3", "qwen35moe.ssm.time_step_rank", gguf::Value::of_u32(3)),
                    "ssm.inner_size 256 is not time_step_rank 3 x state_size 64");
  expect_load_error(
      kTiny.write_variant(
          "groups3", [](gguf::Writer& w) { w.set("qwen35moe.ssm.group_count", gguf::Value::of_u32(3)); },
          nullptr),
      "4 value heads (ssm.time_step_rank) over 3 key heads (ssm.group_count)");
  expect_load_error(kTiny.write_variant("no-sections", nullptr, nullptr, "qwen35moe.rope.dimension_sections"),
                    "qwen35moe.rope.dimension_sections");
  expect_load_error(with_key("rope-odd", "qwen35moe.rope.dimension_count", gguf::Value::of_u32(15)),
                    "qwen35moe.rope.dimension_count 15 must be even");
}

TEST(Qwen35MoeLoad, MissingAndMisshapenTensorsAreNamed) {
  expect_load_error(
      kTiny.write_variant("no-ssm-a", nullptr,
                          [](gguf::TensorSpec& s, std::vector<uint8_t>&) { return s.name != "blk.2.ssm_a"; }),
      "missing tensor 'blk.2.ssm_a' (expected shape {4})");
  expect_load_error(kTiny.write_variant("no-shexp-gate", nullptr,
                                        [](gguf::TensorSpec& s, std::vector<uint8_t>&) {
                                          return s.name != "blk.3.ffn_gate_inp_shexp.weight";
                                        }),
                    "missing tensor 'blk.3.ffn_gate_inp_shexp.weight'");
  expect_load_error(
      kTiny.write_variant("conv-3", nullptr, test_util::reshaped("blk.0.ssm_conv1d.weight", {3, 512})),
      "tensor 'blk.0.ssm_conv1d.weight' has shape {3, 512}, expected {4, 512}");
}

// Trailing multi-token-prediction blocks are not run: with nextn_predict_layers = 1 the last block (the
// attention layer) is one, so the model has three delta-net layers.
TEST(Qwen35MoeLoad, TrailingMtpBlocksAreNotRun) {
  const auto path = with_key("nextn", "qwen35moe.nextn_predict_layers", gguf::Value::of_u32(1));
  const auto f = gguf::File::open(path);
  auto m = load_model(f, {});
  EXPECT_EQ(m->info().n_layer, 3);
  EXPECT_EQ(m->info().attn_layers, (std::vector<bool>{false, false, false}));
  const ForwardRun three = run_file(path);
  EXPECT_EQ(three.capture.expert_ids.size(), 3u * 20u * 4u);
}

}  // namespace
}  // namespace df::models

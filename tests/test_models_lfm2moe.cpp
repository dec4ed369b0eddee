// lfm2moe behaviour that does not need llama.cpp's numbers: batching and decoding give the same logits,
// prefetching never changes them, experts are reached only through the provider (once per layer per
// batch), and bad files or calls fail with specific errors.
//
// What is asserted about batching: every backend op computes a token's row with the same operations whatever
// the batch size (activations are quantized per row; the SIMD kernels' multi-row gemm tiles give each output
// the bits of a single dot product; attention is per query row; the conv is sequential), so one batch,
// chunks of 3 or 7, and one token per forward are bit-identical here, and so are 1, 2 and 3 threads.
// (llama.cpp's own batched and decode paths differ by up to ~1 logit.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "gguf/gguf.h"
#include "models/lfm2moe.h"
#include "models/model.h"
#include "models_test_util.h"
#include "util/error.h"

namespace df::models {
namespace {

using test_util::expect_load_error;
using test_util::load_error;
using test_util::RecordingProvider;
using test_util::run_chunks;

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

TEST(Lfm2Moe, ChunkedPrefillAndDecodeEqualOneBatchBitForBit) {
  auto m = load_model(kTiny.file(), {});
  const auto tokens = kTiny.teacher_forced_tokens();
  const auto one = run_chunks(*m, tokens, tokens.size());
  EXPECT_EQ(run_chunks(*m, tokens, 3), one);
  EXPECT_EQ(run_chunks(*m, tokens, 7), one);
  EXPECT_EQ(run_chunks(*m, tokens, 1), one);

  // Last-row logits of each forward equal the matching row of the batch.
  const size_t V = static_cast<size_t>(m->info().n_vocab);
  auto st = m->new_state(static_cast<int>(tokens.size()));
  std::vector<float> last(V);
  m->forward(*st, std::span<const int32_t>(tokens).first(10), last, false);
  EXPECT_TRUE(std::equal(last.begin(), last.end(), one.begin() + 9 * V));
  m->forward(*st, std::span<const int32_t>(tokens).subspan(10, 1), last, false);
  EXPECT_TRUE(std::equal(last.begin(), last.end(), one.begin() + 10 * V));
}

TEST(Lfm2Moe, DecodeAllocatesNothingOnceWarm) {
  LoadOptions threaded;
  threaded.n_threads = 2;
  auto m = load_model(kTiny.file(), threaded);
  const auto tokens = kTiny.teacher_forced_tokens();
  auto st = m->new_state(64);
  std::vector<float> logits(static_cast<size_t>(m->info().n_vocab));
  m->forward(*st, std::span<const int32_t>(tokens).first(8), logits, false);
  m->forward(*st, std::span<const int32_t>(tokens).subspan(8, 1), logits, false);
  g_allocations = 0;
  g_counting = true;
  for (size_t i = 9; i < 14; ++i)
    m->forward(*st, std::span<const int32_t>(tokens).subspan(i, 1), logits, false);
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
  EXPECT_EQ(st->n_past, 14);
}

TEST(Lfm2Moe, ResetRestartsTheSequence) {
  auto m = load_model(kTiny.file(), {});
  const auto tokens = kTiny.teacher_forced_tokens();
  const std::span<const int32_t> first(tokens.data(), 12);
  const size_t V = static_cast<size_t>(m->info().n_vocab);
  std::vector<float> a(V), b(V);
  auto st = m->new_state(32);
  m->forward(*st, first, a, false);
  st->reset();
  EXPECT_EQ(st->n_past, 0);
  m->forward(*st, first, b, false);
  EXPECT_EQ(a, b);
  EXPECT_GT(st->bytes(), 0u);
}

// Every row of a 40-token prefill, then 6 decode steps: the same bits on 1, 2 and 3 threads.
TEST(Lfm2Moe, ThreadCountDoesNotChangeResults) {
  const auto tokens = kTiny.teacher_forced_tokens();
  const std::span<const int32_t> prompt(tokens.data(), 40);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    LoadOptions o;
    o.n_threads = threads;
    auto m = load_model(kTiny.file(), o);
    const size_t V = static_cast<size_t>(m->info().n_vocab);
    auto st = m->new_state(64);
    std::vector<float> logits(prompt.size() * V), step(V);
    m->forward(*st, prompt, logits, true);
    for (size_t i = 40; i < 46; ++i) {
      m->forward(*st, std::span<const int32_t>(tokens).subspan(i, 1), step, false);
      logits.insert(logits.end(), step.begin(), step.end());
    }
    results.push_back(std::move(logits));
  }
  EXPECT_EQ(results[1], results[0]) << "2 threads";
  EXPECT_EQ(results[2], results[0]) << "3 threads";
}

TEST(Lfm2Moe, EachChosenExpertIsAcquiredOncePerLayerPerBatch) {
  RecordingProvider* rec = nullptr;
  auto m = kTiny.load_recording(1, &rec);
  ASSERT_NE(rec, nullptr);
  const auto tokens = kTiny.teacher_forced_tokens();
  const int T = 7, K = m->info().n_expert_used, n_moe = static_cast<int>(m->info().moe_layers.size());
  auto st = m->new_state(T);
  std::vector<float> logits(static_cast<size_t>(m->info().n_vocab));
  ForwardCapture cap;
  m->forward(*st, std::span<const int32_t>(tokens).first(T), logits, false, &cap);
  ASSERT_EQ(cap.expert_ids.size(), static_cast<size_t>(n_moe * T * K));
  EXPECT_EQ(rec->outstanding, 0);
  size_t total = 0;
  for (int l = 0; l < n_moe; ++l) {
    std::set<int> chosen;
    for (int i = 0; i < T * K; ++i) chosen.insert(cap.expert_ids[static_cast<size_t>(l * T * K + i)]);
    for (int e : chosen) EXPECT_EQ((rec->acquired[{l, e}]), 1) << "layer " << l << " expert " << e;
    total += chosen.size();
    ASSERT_EQ(rec->announced[l].size(), 1u);
    EXPECT_EQ(std::set<int>(rec->announced[l][0].begin(), rec->announced[l][0].end()), chosen);
  }
  EXPECT_EQ(rec->acquired.size(), total);  // nothing acquired that was not chosen
}

TEST(Lfm2Moe, PrefetchGuessesNeverChangeTheLogits) {
  const auto tokens = kTiny.teacher_forced_tokens();
  const std::span<const int32_t> prompt(tokens.data(), 20);
  std::vector<std::vector<float>> results;
  for (int lookahead : {0, 1, 2}) {
    RecordingProvider* rec = nullptr;
    auto m = kTiny.load_recording(lookahead, &rec);
    const int n_moe = static_cast<int>(m->info().moe_layers.size());
    const size_t V = static_cast<size_t>(m->info().n_vocab);
    auto st = m->new_state(32);
    std::vector<float> logits(prompt.size() * V), step(V);
    m->forward(*st, prompt, logits, true);
    // The seed's rule: MoE layer l guesses layers l+1..l+lookahead, so layer j gets min(j, lookahead)
    // guesses.
    std::map<int, int> guesses;
    for (const auto& [layer, ids] : rec->prefetches) {
      ++guesses[layer];
      EXPECT_FALSE(ids.empty());
      EXPECT_LE(ids.size(), static_cast<size_t>(m->info().n_expert));
      for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < m->info().n_expert);
    }
    for (int j = 0; j < n_moe; ++j)
      EXPECT_EQ(guesses[j], std::min(j, lookahead)) << "lookahead " << lookahead;
    const int32_t next = 77;
    m->forward(*st, std::span<const int32_t>(&next, 1), step, false);
    logits.insert(logits.end(), step.begin(), step.end());
    results.push_back(std::move(logits));
  }
  EXPECT_EQ(results[1], results[0]);
  EXPECT_EQ(results[2], results[0]);
}

TEST(Lfm2Moe, ForwardRejectsBadCalls) {
  auto m = load_model(kTiny.file(), {});
  auto other = load_model(kTiny.file(), {});
  const size_t V = static_cast<size_t>(m->info().n_vocab);
  auto st = m->new_state(4);
  std::vector<float> logits(V);
  const std::vector<int32_t> ok = {1, 2}, bad = {1, 2048}, five = {1, 2, 3, 4, 5};
  auto expect_error = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one containing '" << what << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error([&] { m->forward(*st, {}, logits, false); }, "at least one token");
  expect_error([&] { m->forward(*st, bad, logits, false); }, "token id 2048 is out of range");
  expect_error([&] { m->forward(*st, five, logits, false); }, "context full");
  expect_error([&] { m->forward(*st, ok, logits, true); }, "logits buffer holds");
  expect_error([&] { other->forward(*st, ok, logits, false); }, "another model");
  expect_error([&] { m->new_state(0); }, "context size 0");
  EXPECT_EQ(st->n_past, 0);  // nothing ran
  m->forward(*st, ok, logits, false);
  EXPECT_EQ(st->n_past, 2);
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
      kTiny.write_variant("shape", nullptr, [](gguf::TensorSpec& s, std::vector<uint8_t>& bytes) {
        if (s.name == "blk.5.attn_k_norm.weight") {
          s.ne = {32};
          bytes.resize(32 * sizeof(float));
        }
        return true;
      });
  const std::string err = load_error(path);
  EXPECT_NE(err.find("tensor 'blk.5.attn_k_norm.weight' has shape {32}, expected {64}"), std::string::npos)
      << err;
}

TEST(Lfm2MoeLoad, WrongTypeNamesExpectedAndFound) {
  const auto path =
      kTiny.write_variant("type", nullptr, [](gguf::TensorSpec& s, std::vector<uint8_t>& bytes) {
        if (s.name == "blk.0.attn_norm.weight") {
          s.type = GgmlType::F16;
          bytes.resize(bytes.size() / 2);
        }
        return true;
      });
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

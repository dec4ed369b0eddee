// The behaviours every MoE architecture must share, run on each golden tiny model (lfm2moe, qwen3moe,
// gpt-oss), none of which needs llama.cpp's numbers: batching and decoding give the same logits, decode
// allocates nothing once warm, reset and the thread count change nothing, the expert layout describes the
// GGUF tensors, experts are reached only through the provider (once per layer per batch), prefetching never
// changes the logits, and bad calls fail with specific errors. A new architecture joins by adding its golden
// model to the instantiation; what only one architecture does stays in its own test_models_<arch>.cpp.
//
// What is asserted about batching: every backend op computes a token's row with the same operations whatever
// the batch size (activations are quantized per row; the SIMD kernels' multi-row gemm tiles give each output
// the bits of a single dot product; attention is per query row, also across gpt-oss's sliding window;
// lfm2moe's conv is sequential), so one batch, any chunking, and one token per forward are bit-identical
// here, and so are 1, 2 and 3 threads. (llama.cpp's own batched and decode paths differ by up to ~1 logit.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/kernels/cpu_features.h"
#include "error_matchers.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf.h"
#include "models/model.h"
#include "models_test_util.h"
#include "read_ahead_rule.h"
#include "util/argmax.h"
#include "util/error.h"

namespace df::models {
namespace {

using test_util::RecordingProvider;
using test_util::run_chunks;

// What the layout test needs beyond ModelInfo (InfoFromTheGgufKeys in each arch's file asserts the rest).
struct MoeGolden {
  std::string name;
  test_util::GoldenModel model;
  GgmlType expert_type;
  int64_t n_ff_exp;
};

// Static, so that each GGUF is opened once per process rather than once per test.
const MoeGolden kLfm2Moe{"lfm2moe-tiny", {"lfm2moe-tiny", "lfm2moe"}, GgmlType::Q4_0, 128};
const MoeGolden kQwen3Moe{"qwen3moe-tiny", {"qwen3moe-tiny", "qwen3moe"}, GgmlType::Q4_0, 128};
const MoeGolden kGptOss{"gpt-oss-tiny", {"gpt-oss-tiny", "gpt-oss"}, GgmlType::MXFP4, 128};
const MoeGolden kHyV3{"hy_v3-tiny", {"hy_v3-tiny", "hy_v3"}, GgmlType::Q8_0, 128};
const MoeGolden kGemma4{"gemma4-tiny", {"gemma4-tiny", "gemma4"}, GgmlType::Q4_0, 128};
const MoeGolden kQwen35Moe{"qwen35moe-tiny", {"qwen35moe-tiny", "qwen35moe"}, GgmlType::Q4_0, 128};

// gtest would otherwise print the parameter as a bare address.
void PrintTo(const MoeGolden* g, std::ostream* os) { *os << g->name; }

using df::testing::expect_error;

class MoeModelContract : public ::testing::TestWithParam<const MoeGolden*> {
 protected:
  const test_util::GoldenModel& tiny() const { return GetParam()->model; }
};

TEST_P(MoeModelContract, ChunkedPrefillAndDecodeEqualOneBatchBitForBit) {
  auto m = load_model(tiny().file(), {});
  const auto tokens = tiny().teacher_forced_tokens();
  const auto one = run_chunks(*m, tokens, tokens.size());
  // 17 is longer than gpt-oss's window of 16.
  for (size_t chunk : {3, 5, 7, 17, 1}) EXPECT_EQ(run_chunks(*m, tokens, chunk), one) << "chunk " << chunk;

  // Last-row logits of each forward equal the matching row of the batch.
  const size_t V = static_cast<size_t>(m->info().n_vocab);
  auto st = m->new_state(static_cast<int>(tokens.size()));
  std::vector<float> last(V);
  m->forward(*st, std::span<const int32_t>(tokens).first(10), last, false);
  EXPECT_TRUE(std::equal(last.begin(), last.end(), one.begin() + 9 * V));
  m->forward(*st, std::span<const int32_t>(tokens).subspan(10, 1), last, false);
  EXPECT_TRUE(std::equal(last.begin(), last.end(), one.begin() + 10 * V));
}

TEST_P(MoeModelContract, DecodeAllocatesNothingOnceWarm) {
  LoadOptions threaded;
  threaded.n_threads = 2;
  auto m = load_model(tiny().file(), threaded);
  const auto tokens = tiny().teacher_forced_tokens();
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

TEST_P(MoeModelContract, ResetRestartsTheSequence) {
  LoadOptions one;
  one.n_threads = 1;
  auto m = load_model(tiny().file(), one);
  const auto tokens = tiny().teacher_forced_tokens();
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

// A copy of a state (a prompt snapshot) continues as the original does, bit for bit, even into a fresh state
// of a longer context than the prefix: every KV layer's first positions (V is stored transposed, a row per
// head dim) and every recurrent state come along.
TEST_P(MoeModelContract, ACopiedStateContinuesAsTheOriginal) {
  auto m = load_model(tiny().file(), {});
  const auto tokens = tiny().teacher_forced_tokens();
  const size_t V = static_cast<size_t>(m->info().n_vocab);
  std::vector<float> a(V), b(V);
  auto original = m->new_state(32);
  m->forward(*original, std::span<const int32_t>(tokens).first(12), a, false);
  auto copy = m->new_state(32);
  copy->copy_sequence_from(*original);
  EXPECT_EQ(copy->n_past, 12);
  for (size_t t = 12; t < 16; ++t) {
    m->forward(*original, std::span<const int32_t>(tokens).subspan(t, 1), a, false);
    m->forward(*copy, std::span<const int32_t>(tokens).subspan(t, 1), b, false);
    ASSERT_EQ(a, b) << "token " << t;
  }
}

// The last row of a 12-token forward (the last-row-only path), every row of a 40-token prefill, then 6 decode
// steps: the same bits on 1, 2 and 3 threads.
TEST_P(MoeModelContract, ThreadCountDoesNotChangeResults) {
  const auto tokens = tiny().teacher_forced_tokens();
  const std::span<const int32_t> first(tokens.data(), 12), prompt(tokens.data(), 40);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    LoadOptions o;
    o.n_threads = threads;
    auto m = load_model(tiny().file(), o);
    const size_t V = static_cast<size_t>(m->info().n_vocab);
    std::vector<float> last(V);
    auto short_st = m->new_state(32);
    m->forward(*short_st, first, last, false);
    auto st = m->new_state(64);
    std::vector<float> logits(prompt.size() * V), step(V);
    m->forward(*st, prompt, logits, true);
    for (size_t i = 40; i < 46; ++i) {
      m->forward(*st, std::span<const int32_t>(tokens).subspan(i, 1), step, false);
      logits.insert(logits.end(), step.begin(), step.end());
    }
    logits.insert(logits.end(), last.begin(), last.end());
    results.push_back(std::move(logits));
  }
  EXPECT_EQ(results[1], results[0]) << "2 threads";
  EXPECT_EQ(results[2], results[0]) << "3 threads";
}

// The scalar references, AVX2 and AVX-512 (whichever this CPU has) give the same bits end to end: every
// kernel keeps its reference's operations and order, the Q4_0x16-packed ones included, so the SIMD level is
// never a reason for two machines to disagree. The level is chosen by DF_SIMD when the model's backend is
// made.
TEST_P(MoeModelContract, EverySimdLevelGivesTheSameBits) {
  const auto tokens = tiny().teacher_forced_tokens();
  const std::span<const int32_t> prompt(tokens.data(), 24);
  const char* saved = std::getenv("DF_SIMD");
  const std::string restore = saved ? saved : "";
  std::vector<std::pair<std::string, std::vector<float>>> results;
  for (kernels::SimdLevel level : kernels::kAllSimdLevels) {
    if (!kernels::simd_level_supported(level)) continue;
    const std::string name(kernels::simd_level_name(level));
    setenv("DF_SIMD", name.c_str(), 1);
    auto m = load_model(tiny().file(), {});
    const size_t V = static_cast<size_t>(m->info().n_vocab);
    auto st = m->new_state(32);
    std::vector<float> logits(prompt.size() * V), step(V);
    m->forward(*st, prompt, logits, true);
    for (size_t i = 24; i < 27; ++i) {
      m->forward(*st, std::span<const int32_t>(tokens).subspan(i, 1), step, false);
      logits.insert(logits.end(), step.begin(), step.end());
    }
    results.emplace_back(name, std::move(logits));
  }
  if (saved) {
    setenv("DF_SIMD", restore.c_str(), 1);
  } else {
    unsetenv("DF_SIMD");
  }
  ASSERT_GE(results.size(), 1u);
  EXPECT_EQ(results[0].first, "scalar");
  for (size_t i = 1; i < results.size(); ++i)
    EXPECT_EQ(results[i].second, results[0].second) << results[i].first << " against scalar";
}

TEST_P(MoeModelContract, ExpertLayoutDescribesTheGgufTensors) {
  RecordingProvider* rec = nullptr;
  auto m = tiny().load_recording(1, &rec);
  ASSERT_NE(rec, nullptr);
  const ModelInfo& info = m->info();
  ASSERT_EQ(rec->layout.layers.size(), info.moe_layers.size());
  for (size_t i = 0; i < rec->layout.layers.size(); ++i) {
    const ExpertLayerLayout& l = rec->layout.layers[i];
    const std::string blk = "blk." + std::to_string(info.moe_layers[i]) + ".";
    SCOPED_TRACE(blk);
    EXPECT_EQ(l.model_layer, info.moe_layers[i]);
    EXPECT_EQ(l.n_expert, info.n_expert);
    EXPECT_EQ(l.n_embd, info.n_embd);
    EXPECT_EQ(l.n_ff, GetParam()->n_ff_exp);
    // gemma4's file holds fused gate/up experts: both parts name that tensor, up starting after gate's rows.
    const bool fused = tiny().file().find_tensor(blk + "ffn_gate_up_exps.weight") != nullptr;
    EXPECT_EQ(l.gate_up_fused(), fused);
    EXPECT_EQ(l.gate_name, blk + (fused ? "ffn_gate_up_exps.weight" : "ffn_gate_exps.weight"));
    EXPECT_EQ(l.up_name, blk + (fused ? "ffn_gate_up_exps.weight" : "ffn_up_exps.weight"));
    EXPECT_EQ(l.up_row0, fused ? l.n_ff : 0);
    EXPECT_EQ(l.down_name, blk + "ffn_down_exps.weight");
    EXPECT_EQ(l.gate_type, GetParam()->expert_type);
    EXPECT_EQ(l.up_type, GetParam()->expert_type);
    EXPECT_EQ(l.down_type, GetParam()->expert_type);
    const size_t n_expert = static_cast<size_t>(l.n_expert);
    const size_t parts = fused ? 2 : 1;  // a fused tensor holds both parts of every expert
    EXPECT_EQ(l.gate_bytes() * n_expert * parts, tiny().file().find_tensor(l.gate_name)->nbytes);
    EXPECT_EQ(l.up_bytes() * n_expert * parts, tiny().file().find_tensor(l.up_name)->nbytes);
    EXPECT_EQ(l.down_bytes() * n_expert, tiny().file().find_tensor(l.down_name)->nbytes);
  }
}

TEST_P(MoeModelContract, EachChosenExpertIsAcquiredOncePerLayerPerBatch) {
  RecordingProvider* rec = nullptr;
  auto m = tiny().load_recording(1, &rec);
  ASSERT_NE(rec, nullptr);
  const auto tokens = tiny().teacher_forced_tokens();
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
    // Otherwise "once per batch" could not be told apart from "once per token".
    EXPECT_GT(chosen.size(), static_cast<size_t>(K));
    for (int e : chosen) EXPECT_EQ((rec->acquired[{l, e}]), 1) << "layer " << l << " expert " << e;
    total += chosen.size();
    ASSERT_EQ(rec->announced[l].size(), 1u);
    EXPECT_EQ(std::set<int>(rec->announced[l][0].begin(), rec->announced[l][0].end()), chosen);
  }
  EXPECT_EQ(rec->acquired.size(), total);  // nothing acquired that was not chosen
}

TEST_P(MoeModelContract, PrefetchGuessesNeverChangeTheLogits) {
  const auto tokens = tiny().teacher_forced_tokens();
  const std::span<const int32_t> prompt(tokens.data(), 20);
  std::vector<std::vector<float>> results;
  for (int lookahead : {0, 1, 2}) {
    RecordingProvider* rec = nullptr;
    auto m = tiny().load_recording(lookahead, &rec);
    const int n_moe = static_cast<int>(m->info().moe_layers.size());
    const size_t V = static_cast<size_t>(m->info().n_vocab);
    auto st = m->new_state(32);
    std::vector<float> logits(prompt.size() * V), step(V);
    m->forward(*st, prompt, logits, true);
    // read_ahead_rule.h: the seed's rule, and the dense layer before a MoE layer guessing it.
    std::map<int, int> guesses;
    for (const auto& [layer, ids] : rec->prefetches) {
      ++guesses[layer];
      EXPECT_FALSE(ids.empty());
      EXPECT_LE(ids.size(), static_cast<size_t>(m->info().n_expert));
      for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < m->info().n_expert);
    }
    for (int j = 0; j < n_moe; ++j)
      EXPECT_EQ(guesses[j], df::testing::guess_rounds_per_forward(m->info().moe_layers, j, lookahead))
          << "lookahead " << lookahead << ", MoE layer " << j;
    const int32_t next = 77;
    m->forward(*st, std::span<const int32_t>(&next, 1), step, false);
    logits.insert(logits.end(), step.begin(), step.end());
    results.push_back(std::move(logits));
  }
  EXPECT_EQ(results[1], results[0]);
  EXPECT_EQ(results[2], results[0]);
}

TEST_P(MoeModelContract, ForwardRejectsBadCalls) {
  auto m = load_model(tiny().file(), {});
  auto other = load_model(tiny().file(), {});
  const int32_t n_vocab = m->info().n_vocab;
  auto st = m->new_state(4);
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  const std::vector<int32_t> ok = {1, 2}, bad = {1, n_vocab}, neg = {-1}, five = {1, 2, 3, 4, 5};
  expect_error([&] { m->forward(*st, {}, logits, false); }, {"at least one token"});
  expect_error([&] { m->forward(*st, bad, logits, false); },
               {"token id " + std::to_string(n_vocab) + " is out of range"});
  expect_error([&] { m->forward(*st, neg, logits, false); }, {"token id -1 is out of range"});
  expect_error([&] { m->forward(*st, five, logits, false); }, {"context full"});
  expect_error([&] { m->forward(*st, ok, logits, true); }, {"logits buffer holds"});
  expect_error([&] { other->forward(*st, ok, logits, false); }, {"another model"});
  expect_error([&] { m->new_state(0); }, {"context size 0"});
  EXPECT_EQ(st->n_past, 0);  // nothing ran
  m->forward(*st, ok, logits, false);
  EXPECT_EQ(st->n_past, 2);
}

// Greedy steps queued ahead (Model::queue_greedy), on the CPU backend: each step's id is the argmax of the
// logits forward() gives for the same token, a step without a token takes its predecessor's id, the state
// ends where forward() leaves it (the next step's logits bit for bit), and misuse fails with a clear error.
TEST_P(MoeModelContract, GreedyStepsQueuedAheadAreForwardsArgmax) {
  auto m = load_model(tiny().file(), {});
  ASSERT_TRUE(m->queues_greedy());
  EXPECT_FALSE(m->greedy_runs_ahead());  // the CPU computes as the ops come
  const auto tokens = tiny().teacher_forced_tokens();
  const auto prompt = std::span<const int32_t>(tokens).first(6);
  const size_t V = static_cast<size_t>(m->info().n_vocab);
  std::vector<float> logits(V), a_next(V), b_next(V);
  auto a = m->new_state(16), b = m->new_state(16);
  m->forward(*a, prompt, logits, false);
  int32_t t = first_argmax(logits);
  const int32_t first = t;
  std::vector<int32_t> want;
  for (int i = 0; i < 5; ++i) {
    m->forward(*a, std::span(&t, 1), logits, false);
    t = first_argmax(logits);
    want.push_back(t);
  }
  m->forward(*b, prompt, logits, false);
  expect_error([&] { m->queue_greedy(*b, -1, 0); }, {"must follow a greedy step of the same state"});
  expect_error([&] { m->queue_greedy(*b, first, backend::Backend::kReadBackSlots); }, {"read-back slot"});
  EXPECT_EQ(b->n_past, 6);  // nothing ran
  m->queue_greedy(*b, first, 0);
  std::vector<int32_t> got;
  for (int i = 0; i < 5; ++i) {
    if (i + 1 < 5) m->queue_greedy(*b, -1, (i + 1) % backend::Backend::kReadBackSlots);
    got.push_back(m->greedy_token(i % backend::Backend::kReadBackSlots));
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(b->n_past, a->n_past);
  m->forward(*a, std::span(&want.back(), 1), a_next, false);
  m->forward(*b, std::span(&got.back(), 1), b_next, false);
  EXPECT_EQ(a_next, b_next);
}

INSTANTIATE_TEST_SUITE_P(TinyGoldens, MoeModelContract,
                         ::testing::Values(&kLfm2Moe, &kQwen3Moe, &kGptOss, &kHyV3, &kGemma4, &kQwen35Moe),
                         [](const ::testing::TestParamInfo<const MoeGolden*>& p) {
                           std::string name = p.param->name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace df::models

// Decode steps replayed as CUDA graphs (backend/cuda/step_graph.h) give the bits of the same steps run op by
// op: two sequences decoded in alternation (each its own graph key), batches of other sizes between them
// (other keys, and allocations that retire the graphs), on every golden model. Label `gpu`: skipped without
// a GPU, saying why.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "gguf/gguf.h"
#include "golden_checks.h"
#include "golden_json.h"
#include "models/model.h"
#include "util/argmax.h"
#include "util/error.h"

namespace df::models {
namespace {

struct DecodeRun {
  std::vector<float> logits;
  uint64_t replays = 0;
};

// Sequence A: the teacher-forced prompt's first 6 tokens as one batch, then one token a step; sequence B:
// 4 tokens, then one a step, alternating with A; every 9th step of A is a batch of 2 instead.
DecodeRun decode(const std::string& name, bool graphs) {
  if (graphs)
    unsetenv("DF_CUDA_GRAPH");
  else
    setenv("DF_CUDA_GRAPH", "0", 1);
  LoadOptions options;
  options.backend = backend::make_backend({"cuda", 0});
  unsetenv("DF_CUDA_GRAPH");
  std::ifstream in(df::testing::golden_path(name + ".json"));
  const nlohmann::json meta = nlohmann::json::parse(in);
  const std::vector<int32_t> tokens = meta["teacher_forced"]["tokens"];
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  auto model = load_model(file, options);
  const size_t V = static_cast<size_t>(model->info().n_vocab);
  const int n = static_cast<int>(tokens.size());
  auto a = model->new_state(n), b = model->new_state(n);
  DecodeRun run;
  std::vector<float> logits(2 * V);
  const auto step = [&](ModelState& st, size_t at, size_t count) {
    model->forward(st, std::span<const int32_t>(tokens).subspan(at, count), std::span<float>(logits).first(V),
                   false);
    run.logits.insert(run.logits.end(), logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(V));
  };
  step(*a, 0, 6);
  step(*b, 0, 4);
  size_t at_a = 6, at_b = 4;
  for (int s = 0; at_a < tokens.size() && at_b < tokens.size(); ++s) {
    const size_t count = (s % 9 == 8 && at_a + 2 <= tokens.size()) ? 2 : 1;
    step(*a, at_a, count);
    at_a += count;
    step(*b, at_b, 1);
    at_b += 1;
  }
  run.replays = options.backend->steps_replayed();
  return run;
}

class CudaGraphs : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    try {
      backend::make_backend({"cuda", 0});
    } catch (const std::exception& e) {
      GTEST_SKIP() << "no cuda backend here: " << e.what();
    }
  }
};

TEST_P(CudaGraphs, ReplayedStepsGiveTheBitsOfEagerSteps) {
  const DecodeRun eager = decode(GetParam(), false), graphs = decode(GetParam(), true);
  EXPECT_EQ(eager.replays, 0u);
  EXPECT_GT(graphs.replays, 10u) << "the decode steps were not replayed from graphs";
  ASSERT_EQ(eager.logits.size(), graphs.logits.size());
  ASSERT_FALSE(eager.logits.empty());
  EXPECT_EQ(std::memcmp(eager.logits.data(), graphs.logits.data(), eager.logits.size() * sizeof(float)), 0);
}

// Greedy decoding queued ahead (Model::queue_greedy): the device's argmax feeds the next step, which is
// queued before the previous id has come back. The ids are those of the host's argmax over the logits that
// forward() reads back, the steps after the first are graph replays, and the state it leaves decodes the
// next token to the bits of the state the host's loop leaves.
TEST_P(CudaGraphs, GreedyStepsQueuedAheadGiveTheHostsGreedyTokensAndState) {
  LoadOptions options;
  options.backend = backend::make_backend({"cuda", 0});
  std::ifstream in(df::testing::golden_path(GetParam() + ".json"));
  const nlohmann::json meta = nlohmann::json::parse(in);
  const std::vector<int32_t> tokens = meta["teacher_forced"]["tokens"];
  const auto file = gguf::File::open(df::testing::golden_path(GetParam() + ".gguf"));
  auto model = load_model(file, options);
  ASSERT_TRUE(model->queues_greedy());
  const size_t V = static_cast<size_t>(model->info().n_vocab);
  const int steps = 12, n_ctx = 6 + steps + 2;
  const auto prompt = std::span<const int32_t>(tokens).first(6);
  std::vector<float> logits(V), host_next(V), ahead_next(V);

  // The host's loop: read the logits back, take their argmax, decode it.
  auto host = model->new_state(n_ctx);
  model->forward(*host, prompt, logits, false);
  const int32_t first = first_argmax(logits);
  std::vector<int32_t> host_ids;
  int32_t t = first;
  for (int i = 0; i < steps; ++i) {
    model->forward(*host, std::span(&t, 1), logits, false);
    t = first_argmax(logits);
    host_ids.push_back(t);
  }

  // Queued ahead: the first step with the host's token, each later one with the device's id, one step
  // queued beyond the id being read back.
  auto ahead = model->new_state(n_ctx);
  model->forward(*ahead, prompt, logits, false);
  const uint64_t replays_before = options.backend->steps_replayed();
  model->queue_greedy(*ahead, first, 0);
  std::vector<int32_t> ahead_ids;
  for (int i = 0; i < steps; ++i) {
    if (i + 1 < steps) model->queue_greedy(*ahead, -1, (i + 1) % backend::Backend::kReadBackSlots);
    ahead_ids.push_back(model->greedy_token(i % backend::Backend::kReadBackSlots));
  }
  EXPECT_EQ(ahead_ids, host_ids);
  EXPECT_EQ(ahead->n_past, host->n_past);
  EXPECT_GE(options.backend->steps_replayed() - replays_before, static_cast<uint64_t>(steps - 3))
      << "the greedy steps were not replayed from graphs";

  // Both states decode the same next token to the same bits.
  model->forward(*host, std::span(&host_ids.back(), 1), host_next, false);
  model->forward(*ahead, std::span(&ahead_ids.back(), 1), ahead_next, false);
  EXPECT_EQ(std::memcmp(host_next.data(), ahead_next.data(), V * sizeof(float)), 0);

  // A step without a token must follow a greedy step of the same state.
  EXPECT_THROW(model->queue_greedy(*ahead, -1, 0), df::Error);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaGraphs,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-tiny-f16", "qwen3moe-tiny",
                                           "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"),
                         golden::golden_test_name);

}  // namespace
}  // namespace df::models

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

INSTANTIATE_TEST_SUITE_P(Cuda, CudaGraphs,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-tiny-f16", "qwen3moe-tiny",
                                           "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"),
                         golden::golden_test_name);

}  // namespace
}  // namespace df::models

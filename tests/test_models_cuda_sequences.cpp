// Sequences sharing forwards on the GPU (Model::forward_many on the CUDA backend), on every golden model,
// with the schedules of test_models_sequences: decode batches within the backend's batch_invariant_rows give
// each sequence the bits of its forwards alone (what serve's determinism rests on there); batches beyond it
// (a prompt beside decode steps) run the tensor-core tiles, whose sums come in another order, and stay within
// the model's golden logit tolerance (llama.cpp's own spread between its paths) of the alone run, which a
// batch that mixed up rows or states would not. Label `gpu`: skipped without a GPU, saying why.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/model.h"
#include "sequences_rules.h"

namespace df::models {
namespace {

class CudaSequences : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    try {
      backend::make_backend({"cuda", 0});
    } catch (const std::exception& e) {
      GTEST_SKIP() << "no cuda backend here: " << e.what();
    }
  }
};

TEST_P(CudaSequences, DecodeBatchesGiveTheAloneBitsAndMixedOnesStayWithinTolerance) {
  std::ifstream in(df::testing::golden_path(GetParam() + ".json"));
  const std::vector<int32_t> tokens = nlohmann::json::parse(in)["teacher_forced"]["tokens"];
  const auto file = gguf::File::open(df::testing::golden_path(GetParam() + ".gguf"));
  LoadOptions options;
  options.backend = backend::make_backend({"cuda", 0});
  auto model = load_model(file, options);
  ASSERT_GE(options.backend->batch_invariant_rows(), 3);
  sequences_rules::expect_together_equals_alone(*model, tokens, sequences_rules::decode_schedule());
  std::ifstream again(df::testing::golden_path(GetParam() + ".json"));
  const float tolerance = nlohmann::json::parse(again)["tolerance"]["logit_abs"];
  const float worst = sequences_rules::together_vs_alone(*model, tokens, sequences_rules::mixed_schedule());
  EXPECT_LE(worst, tolerance);
  std::cout << GetParam() << ": mixed batches differ from alone by at most " << worst
            << " in logits (tolerance " << tolerance << ")\n";
}

INSTANTIATE_TEST_SUITE_P(Goldens, CudaSequences,
                         ::testing::Values("lfm2moe-tiny", "qwen3moe-tiny", "gpt-oss-tiny",
                                           "lfm2moe-tiny-f16", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string name = p.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace df::models

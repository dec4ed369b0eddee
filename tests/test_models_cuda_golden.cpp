// The golden comparison rule (golden/README.md) with every model on the CUDA backend: expert choices,
// per-layer residuals, teacher-forced logits in one batch and through the decode path (so that results do
// not depend on the batch in a way the rules would catch), greedy generation. Plus: the same run twice gives
// the same bits. Label `gpu`: on a machine without a GPU (or a build without CUDA) every test is skipped
// with the reason; run them with `ctest -L gpu` on a GPU machine.
#include <cstring>

#define DF_GOLDEN_DEVICE "cuda"
#include "models_golden_rules.h"

namespace df::models::golden {
namespace {

INSTANTIATE_TEST_SUITE_P(Cuda, MoeGolden,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-tiny-f16", "lfm2moe-medium",
                                           "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny",
                                           "qwen35moe-tiny"),
                         golden_test_name);

class CudaRepeat : public MoeGolden {};

// Two fresh states, the teacher-forced prompt in chunks of 7 then single tokens: the same bits both times.
TEST_P(CudaRepeat, TheSameRunTwiceGivesTheSameBits) {
  Golden& g = golden(GetParam());
  Model& m = *g.model;
  const std::vector<int32_t> tokens = g.meta["teacher_forced"]["tokens"];
  const size_t V = static_cast<size_t>(m.info().n_vocab);
  const auto run = [&] {
    auto st = m.new_state(static_cast<int>(tokens.size()));
    std::vector<float> all, logits;
    for (size_t at = 0; at < tokens.size();) {
      const size_t n = at < 42 ? std::min<size_t>(7, 42 - at) : 1;
      logits.assign(n * V, 0.0f);
      m.forward(*st, std::span<const int32_t>(tokens).subspan(at, n), logits, true);
      all.insert(all.end(), logits.begin(), logits.end());
      at += n;
    }
    return all;
  };
  const auto a = run(), b = run();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaRepeat,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-tiny-f16", "qwen3moe-tiny",
                                           "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"),
                         golden_test_name);

}  // namespace
}  // namespace df::models::golden

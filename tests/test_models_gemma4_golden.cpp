// gemma4 against llama.cpp on the project's own golden model gemma4-tiny (tests/golden: three sliding layers
// of window 16 with 64-wide heads and a global layer with 128-wide heads, K = V and proportional RoPE; GeGLU
// dense and expert branches, per-expert and per-layer output scales, soft-capped logits; Q4_0 matrices and
// experts, a Q6_K tied embedding; the Gemma 4 tokenizer), with exactly the comparison rule of
// golden/README.md (models_golden_rules.h).
#include "models_golden_rules.h"

namespace df::models::golden {
namespace {

INSTANTIATE_TEST_SUITE_P(Models, MoeGolden, ::testing::Values("gemma4-tiny"), golden_test_name);

}  // namespace
}  // namespace df::models::golden

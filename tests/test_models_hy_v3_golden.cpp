// hy_v3 against llama.cpp on the project's own golden model hy_v3-tiny (tests/golden: Q8_0 matmuls, experts,
// shared experts and head, one dense layer, sigmoid routing with a selection bias and expert_weights_scale,
// the hunyuan-dense tokenizer), with exactly the comparison rule of golden/README.md (models_golden_rules.h).
#include "models_golden_rules.h"

namespace df::models::golden {
namespace {

INSTANTIATE_TEST_SUITE_P(Models, MoeGolden, ::testing::Values("hy_v3-tiny"), golden_test_name);

}  // namespace
}  // namespace df::models::golden

// qwen3moe against llama.cpp on the golden model qwen3moe-tiny (Q4_0 matmuls and experts, Q6_K output), with
// exactly the comparison rule of golden/README.md (models_golden_rules.h).
#include "models_golden_rules.h"

namespace df::models::golden {
namespace {

INSTANTIATE_TEST_SUITE_P(Models, MoeGolden, ::testing::Values("qwen3moe-tiny"), golden_test_name);

}  // namespace
}  // namespace df::models::golden

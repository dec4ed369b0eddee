// qwen35moe against llama.cpp on the project's own golden model qwen35moe-tiny (tests/golden: three gated
// delta-net layers and one gated-attention layer with partial RoPE, softmax routing, the sigmoid-gated shared
// expert, the qwen35 tokenizer), with exactly the comparison rule of golden/README.md
// (models_golden_rules.h).
#include "models_golden_rules.h"

namespace df::models::golden {
namespace {

INSTANTIATE_TEST_SUITE_P(Models, MoeGolden, ::testing::Values("qwen35moe-tiny"), golden_test_name);

}  // namespace
}  // namespace df::models::golden

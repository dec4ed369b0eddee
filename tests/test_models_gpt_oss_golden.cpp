// gpt-oss against llama.cpp on the golden model gpt-oss-tiny (MXFP4 experts, Q8_0 elsewhere, sliding window
// 16 on even layers, attention sinks, YaRN), with exactly the comparison rule of golden/README.md
// (models_golden_rules.h). The `long` generation crosses the window many times.
#include "models_golden_rules.h"

namespace df::models::golden {
namespace {

INSTANTIATE_TEST_SUITE_P(Models, MoeGolden, ::testing::Values("gpt-oss-tiny"), golden_test_name);

}  // namespace
}  // namespace df::models::golden

// lfm2moe against llama.cpp on the golden models lfm2moe-tiny, lfm2moe-medium and lfm2moe-tiny-f16, with
// exactly the comparison rule of golden/README.md (models_golden_rules.h).
#include "models_golden_rules.h"

namespace df::models::golden {
namespace {

INSTANTIATE_TEST_SUITE_P(Models, MoeGolden,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-medium", "lfm2moe-tiny-f16"),
                         golden_test_name);

}  // namespace
}  // namespace df::models::golden

// The golden rule's building blocks fail where they must: a NaN or infinity anywhere in a row (also outside
// the top 5, also where a max or an argmax would step over it), a top-5 logit out of tolerance, and a
// different expert set away from a near-tie; and they pass a row that is within the rule.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "golden_checks.h"

namespace df::models::golden {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A generation step whose reference top 5 are ids 0..4.
json step_with_top5() {
  json s;
  s["top5"] = json::array();
  for (int i = 0; i < 5; ++i) s["top5"].push_back({i, 10.0 - i});
  return s;
}

std::vector<float> row_matching_top5() {
  std::vector<float> row(64, -3.0f);
  for (int i = 0; i < 5; ++i) row[static_cast<size_t>(i)] = static_cast<float>(10.0 - i);
  return row;
}

TEST(GoldenChecks, AnyNonFiniteValueFailsWhereverItIs) {
  for (float bad : {kNaN, kInf, -kInf}) {
    std::vector<float> row = row_matching_top5();
    EXPECT_TRUE(expect_finite(row.data(), row.size(), "clean"));
    row[40] = bad;  // outside the top 5
    EXPECT_NONFATAL_FAILURE(expect_finite(row.data(), row.size(), "row"), "value 40 is");
    const json s = step_with_top5();
    EXPECT_NONFATAL_FAILURE(check_top5(row.data(), static_cast<int>(row.size()), s, 0.5, "step"),
                            "value 40 is");
  }
}

TEST(GoldenChecks, MaxAbsDiffIsInfiniteOnANaNAndExactOtherwise) {
  std::vector<float> want = row_matching_top5(), got = want;
  got[7] += 0.25f;
  EXPECT_DOUBLE_EQ(max_abs_diff(got.data(), want.data(), static_cast<int>(got.size())), 0.25);
  got[50] = kNaN;
  EXPECT_EQ(max_abs_diff(got.data(), want.data(), static_cast<int>(got.size())),
            std::numeric_limits<double>::infinity());
}

TEST(GoldenChecks, TopFiveOutsideTheToleranceFailsAndWithinPasses) {
  std::vector<float> row = row_matching_top5();
  const json s = step_with_top5();
  EXPECT_DOUBLE_EQ(check_top5(row.data(), static_cast<int>(row.size()), s, 0.5, "step"), 0.0);
  row[3] += 0.4f;
  EXPECT_NEAR(check_top5(row.data(), static_cast<int>(row.size()), s, 0.5, "step"), 0.4, 1e-6);
  row[3] += 0.2f;
  EXPECT_NONFATAL_FAILURE(check_top5(row.data(), static_cast<int>(row.size()), s, 0.5, "step"),
                          "step token 3");
}

TEST(GoldenChecks, ADifferentExpertSetFailsUnlessTheReferenceCallsItANearTie) {
  json tf;
  tf["expert_choices"] = json::array({json::array({json::array({1, 2, 3, 4}), json::array({5, 6, 7, 8})})});
  tf["routing_near_ties"] = json::array({json::array({1, 7, 1e-6, json::array({5, 6, 7, 8})})});
  const int32_t same[4] = {4, 3, 2, 1}, other[4] = {1, 2, 3, 9}, at_tie[4] = {5, 6, 7, 9};
  bool tie = true;
  EXPECT_TRUE(same_experts_or_near_tie(same, 4, tf, 0, 0, 7, &tie));  // order does not matter
  EXPECT_NONFATAL_FAILURE(same_experts_or_near_tie(other, 4, tf, 0, 0, 7, &tie), "non-near-tie");
  EXPECT_FALSE(tie);
  EXPECT_FALSE(same_experts_or_near_tie(at_tie, 4, tf, 0, 1, 7, &tie));  // position 1, layer 7: a near-tie
  EXPECT_TRUE(tie);
}

}  // namespace
}  // namespace df::models::golden

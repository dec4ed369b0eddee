#pragma once
// The pieces of the golden comparison rule (golden/README.md) that every check uses: reading the reference
// files, NaN-proof differences and finiteness, the top-5 check of a generation step and the near-tie rule for
// expert choices. Kept apart from the test suite (models_golden_rules.h) so that a test can show each piece
// failing on bad input (test_models_golden_checks.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace df::models::golden {

// A golden model's name as a test name ('-' is not allowed there).
inline std::string golden_test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

using nlohmann::json;

inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  in.seekg(0, std::ios::end);
  std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

inline std::set<int> as_set(const int32_t* ids, int k) { return std::set<int>(ids, ids + k); }

inline int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;  // lowest id wins an exact tie
  return best;
}

// A NaN or an infinity anywhere fails, wherever it is (a max or an argmax would step over a NaN). Returns
// whether every value was finite.
inline bool expect_finite(const float* x, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) {
      ADD_FAILURE() << what << ": value " << i << " is " << x[i]
                    << " (every logit and residual must be finite)";
      return false;
    }
  return true;
}

// max_v |got[v] - want[v]|, infinite when any got[v] is not finite (std::max would skip a NaN).
inline double max_abs_diff(const float* got, const float* want, int n) {
  double d = 0;
  for (int v = 0; v < n; ++v) {
    const double e = std::abs(double(got[v]) - want[v]);
    if (!std::isfinite(e)) return std::numeric_limits<double>::infinity();
    d = std::max(d, e);
  }
  return d;
}

// Rule 4's logit check of one generation step: the engine's logits of the reference top-5 ids within T, and
// every logit of the step finite. Returns the worst difference.
inline double check_top5(const float* logits, int V, const json& step, double T, const std::string& where) {
  expect_finite(logits, static_cast<size_t>(V), where);
  double worst = 0;
  for (const auto& tv : step["top5"]) {
    const double got = logits[tv[0].get<size_t>()];
    const double d =
        std::isfinite(got) ? std::abs(got - tv[1].get<double>()) : std::numeric_limits<double>::infinity();
    worst = std::max(worst, d);
    EXPECT_LE(d, T) << where << " token " << tv[0];
  }
  return worst;
}

// Rule 1 at one (position, MoE layer) of the teacher-forced prompt: true when the engine's set equals the
// reference's; a differing set fails unless the reference lists that pair as a near-tie.
inline bool same_experts_or_near_tie(const int32_t* ids, int k, const json& tf, size_t moe_index,
                                     int position, int model_layer, bool* near_tie) {
  const std::vector<int> ref_ids = tf["expert_choices"][moe_index][static_cast<size_t>(position)];
  if (as_set(ids, k) == std::set<int>(ref_ids.begin(), ref_ids.end())) return true;
  bool tie = false;
  for (const auto& nt : tf["routing_near_ties"])
    if (nt[0].get<int>() == position && nt[1].get<int>() == model_layer) tie = true;
  EXPECT_TRUE(tie) << "token " << position << " layer " << model_layer
                   << ": expert set differs at a non-near-tie";
  *near_tie = tie;
  return false;
}

}  // namespace df::models::golden

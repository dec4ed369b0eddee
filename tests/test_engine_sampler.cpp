#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/sampler.h"
#include "error_matchers.h"
#include "util/error.h"

using df::Sampler;
using df::SamplingParams;

namespace {
SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}
}  // namespace

TEST(Sampler, GreedyTakesTheArgmaxAndTheLowestIdOnATie) {
  Sampler s(5, greedy());
  std::vector<float> l{1, 3, 2, 3, -1};
  EXPECT_EQ(s.sample(l), 1);
  l[4] = 9;
  EXPECT_EQ(s.sample(l), 4);
}

TEST(Sampler, RepetitionPenaltyDemotesRecentTokens) {
  auto p = greedy();
  p.repeat_penalty = 2.0f;
  Sampler s(3, p);
  std::vector<float> l{3.0f, 2.0f, -1.0f};
  s.accept(0);
  EXPECT_EQ(s.sample(l), 1);  // 3/2 = 1.5 < 2
  // Now 0 and 1 are both recent: 1.5 vs 1.0 vs -1
  EXPECT_EQ(s.sample(l), 0);
}

// OpenAI's penalties: the frequency penalty per occurrence among the recent tokens, the presence penalty
// once.
TEST(Sampler, FrequencyAndPresencePenaltiesSubtractFromRecentTokens) {
  auto p = greedy();
  p.frequency_penalty = 1.0f;
  Sampler s(3, p);
  s.accept(0);
  s.accept(0);
  std::vector<float> l{3.5f, 2.0f, 1.0f};
  EXPECT_EQ(s.sample(l), 1);  // 3.5 - 2 x 1 = 1.5 < 2
  auto q = greedy();
  q.presence_penalty = 1.0f;
  Sampler t(3, q);
  t.accept(0);
  t.accept(0);
  EXPECT_EQ(t.sample(l), 0);  // 3.5 - 1 = 2.5 > 2: presence counts a token once
  t.accept(1);
  std::vector<float> m{2.4f, 2.3f, 1.5f};
  EXPECT_EQ(t.sample(m), 2);  // 1.4 and 1.3 (both recent) < 1.5
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  Sampler s(4, p);
  std::vector<float> l{0.1f, 0.3f, 0.2f, 0.0f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, DrawsFollowTheSoftmaxAndTheSeed) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 42;
  std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s(3, p);
  std::map<int, int> counts;
  const int n = 20000;
  std::vector<int> first;
  for (int i = 0; i < n; ++i) {
    int t = s.sample(l);
    counts[t]++;
    if (i < 20) first.push_back(t);
  }
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.015);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.015);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.015);
  Sampler again(3, p);
  for (int t : first) EXPECT_EQ(again.sample(l), t);
}

TEST(Sampler, TopPAndMinPCutTheTail) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.75f;  // keeps 0.5 + 0.3
  p.min_p = 0.0f;
  std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s(3, p);
  for (int i = 0; i < 2000; ++i) EXPECT_NE(s.sample(l), 2);
  p.top_p = 1.0f;
  p.min_p = 0.7f;  // keeps only tokens with p >= 0.35
  Sampler m(3, p);
  for (int i = 0; i < 2000; ++i) EXPECT_EQ(m.sample(l), 0);
}

TEST(Sampler, RejectsBadParameters) {
  SamplingParams p;
  p.top_p = 0;
  df::testing::expect_error([&] { Sampler(3, p); }, {"--top-p 0 must be in (0, 1]"});
  p = {};
  p.min_p = 2;
  df::testing::expect_error([&] { Sampler(3, p); }, {"--min-p 2 must be in [0, 1]"});
  Sampler s(3, {});
  std::vector<float> wrong(4);
  df::testing::expect_error([&] { s.sample(wrong); }, {"sampler: 4 logits given for a vocabulary of 3"});
}

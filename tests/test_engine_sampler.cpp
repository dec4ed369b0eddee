#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <vector>

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
// The scalar definitions the fast selections must equal: one scan keeping the first strictly greater, and a
// partial sort by (logit desc, id asc).
int32_t argmax_reference(const std::vector<float>& x) {
  int32_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

std::vector<Sampler::Candidate> top_k_reference(const std::vector<float>& x, int k) {
  std::vector<Sampler::Candidate> c;
  for (size_t i = 0; i < x.size(); ++i) c.push_back({static_cast<int32_t>(i), x[i], 0.0f});
  std::partial_sort(c.begin(), c.begin() + k, c.end(), [](const auto& a, const auto& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  });
  c.resize(static_cast<size_t>(k));
  return c;
}

// Logits with many ties (a few distinct values), infinities, and sizes around the argmax's lane width.
std::vector<float> tied_logits(std::mt19937& rng, size_t n, bool with_nan) {
  std::vector<float> x(n);
  const float values[] = {-std::numeric_limits<float>::infinity(), -2.5f, 0.0f, -0.0f, 1.0f, 3.25f,
                          std::numeric_limits<float>::infinity()};
  for (float& v : x) {
    const unsigned r = rng() % 100;
    v = r < 90 ? values[1 + rng() % 5] : values[rng() % 7];
    if (with_nan && rng() % 20 == 0) v = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}
}  // namespace

TEST(Sampler, ArgmaxEqualsTheScalarScanOnTiesInfinitiesAndNaN) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4000; ++trial) {
    const size_t n = 1 + rng() % 70;
    const auto x = tied_logits(rng, n, trial % 2 == 1);
    ASSERT_EQ(Sampler::argmax(x), argmax_reference(x)) << "trial " << trial << ", " << n << " logits";
  }
  std::vector<float> big(65536);
  std::normal_distribution<float> normal;
  for (float& v : big) v = normal(rng);
  for (size_t at : {size_t{0}, size_t{15}, size_t{16}, size_t{40000}, size_t{65535}}) {
    auto x = big;
    x[at] = 100.0f;
    x[(at + 7) % x.size()] = 100.0f;  // a tie: the lower id wins
    EXPECT_EQ(Sampler::argmax(x), argmax_reference(x)) << "maximum at " << at;
  }
}

TEST(Sampler, TopKEqualsThePartialSortOnTiesAndInfinities) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    const size_t n = 2 + rng() % 200;
    const int k = 1 + static_cast<int>(rng() % (n - 1));
    const auto x = tied_logits(rng, n, false);
    std::vector<Sampler::Candidate> out(n);
    std::vector<float> heap(static_cast<size_t>(k));
    Sampler::top_k(x, k, out, heap);
    const auto want = top_k_reference(x, k);
    for (int i = 0; i < k; ++i) {
      ASSERT_EQ(out[static_cast<size_t>(i)].id, want[static_cast<size_t>(i)].id)
          << "trial " << trial << ", rank " << i;
      ASSERT_EQ(
          std::memcmp(&out[static_cast<size_t>(i)].logit, &want[static_cast<size_t>(i)].logit, sizeof(float)),
          0);
    }
  }
}

TEST(Sampler, ANaNLogitIsAnErrorWhenSampling) {
  SamplingParams p;
  p.top_k = 2;
  Sampler s(4, p);
  std::vector<float> l{1, std::numeric_limits<float>::quiet_NaN(), 2, 0};
  df::testing::expect_error([&] { s.sample(l); }, {"the logit of token 1 is NaN"});
  p.top_k = 0;
  Sampler all(4, p);
  df::testing::expect_error([&] { all.sample(l); }, {"the logit of token 1 is NaN"});
}

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

// A top-k above the vocabulary is no cut, and costs no more memory than the vocabulary.
TEST(Sampler, ATopKAboveTheVocabularyDrawsAsNoTopK) {
  SamplingParams huge;
  huge.top_k = std::numeric_limits<int>::max();
  SamplingParams off = huge;
  off.top_k = 0;
  Sampler a(5, huge), b(5, off);
  const std::vector<float> l{0.5f, 1.5f, -1.0f, 1.2f, 0.0f};
  for (int i = 0; i < 40; ++i) EXPECT_EQ(a.sample(l), b.sample(l)) << "draw " << i;
  rusage usage{};
  ASSERT_EQ(getrusage(RUSAGE_SELF, &usage), 0);
  EXPECT_LT(usage.ru_maxrss, 1L << 20) << "KiB: the sampler's buffers follow the vocabulary, not top-k";
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

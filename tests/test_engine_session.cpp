#include <gtest/gtest.h>

#include "engine/generate.h"
#include "engine/session.h"
#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/model.h"
#include "util/error.h"

using df::Session;

namespace {

struct Fixture {
  df::gguf::File file = df::gguf::File::open(df::testing::golden_path("lfm2moe-tiny.gguf"));
  std::unique_ptr<df::models::Model> model = df::models::load_model(file, {});
  std::vector<int32_t> prompt;
  Fixture() {
    auto j = df::testing::golden_json("lfm2moe-tiny");
    prompt = j["generation"][1]["prompt_ids"].get<std::vector<int32_t>>();  // 60 tokens
  }
};

Fixture& fx() {
  static Fixture f;
  return f;
}

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

}  // namespace

TEST(Session, ExtendingThePromptReusesTheCacheAndMatchesAFreshRun) {
  auto& f = fx();
  std::vector<int32_t> a(f.prompt.begin(), f.prompt.begin() + 20);
  std::vector<int32_t> ab(f.prompt.begin(), f.prompt.begin() + 35);
  Session reuse(*f.model, 64, 64);
  reuse.prefill(a);
  auto extended = copy(reuse.prefill(ab));
  EXPECT_EQ(reuse.stats().tokens_reused, 20);
  EXPECT_EQ(reuse.stats().tokens_evaluated, 15);
  Session fresh(*f.model, 64, 20);  // the same chunks: [0, 20) then [20, 35)
  auto direct = copy(fresh.prefill(ab));
  EXPECT_EQ(extended, direct);
}

TEST(Session, ACachedPromptIsNotEvaluatedAgain) {
  auto& f = fx();
  Session s(*f.model, 64, 16);
  auto first = copy(s.prefill(f.prompt));
  auto again = copy(s.prefill(f.prompt));
  EXPECT_EQ(s.stats().tokens_evaluated, 0);
  EXPECT_EQ(first, again);
}

TEST(Session, AChangeBeforeTheCachedEndRestartsFromTokenZero) {
  auto& f = fx();
  Session s(*f.model, 64, 16);
  s.prefill(f.prompt);
  auto changed = f.prompt;
  changed[10] = (changed[10] + 1) % 2048;
  auto after = copy(s.prefill(changed));
  EXPECT_EQ(s.stats().restarts, 1);
  EXPECT_EQ(s.stats().tokens_reused, 0);
  EXPECT_EQ(s.stats().tokens_evaluated, static_cast<int>(changed.size()));
  Session fresh(*f.model, 64, 16);
  EXPECT_EQ(after, copy(fresh.prefill(changed)));
  // A shorter prompt (a strict prefix of the cache) also restarts: the conv state cannot rewind.
  std::vector<int32_t> shorter(changed.begin(), changed.begin() + 30);
  auto short_logits = copy(s.prefill(shorter));
  EXPECT_EQ(s.stats().restarts, 2);
  Session fresh2(*f.model, 64, 16);
  EXPECT_EQ(short_logits, copy(fresh2.prefill(shorter)));
}

TEST(Session, DecodeMatchesPrefillOfTheSameTokensInTheSameChunks) {
  auto& f = fx();
  std::vector<int32_t> a(f.prompt.begin(), f.prompt.begin() + 10);
  Session s(*f.model, 64, 64);
  s.prefill(a);
  std::vector<float> last;
  for (int i = 10; i < 14; ++i) last = copy(s.decode(f.prompt[static_cast<size_t>(i)]));
  EXPECT_EQ(s.tokens().size(), 14u);
  Session t(*f.model, 64, 64);
  t.prefill(a);
  for (int i = 10; i < 13; ++i) t.prefill(std::span<const int32_t>(f.prompt.data(), static_cast<size_t>(i) + 1));
  EXPECT_EQ(copy(t.prefill(std::span<const int32_t>(f.prompt.data(), 14))), last);
}

TEST(Session, ContextLimitsGiveClearErrors) {
  auto& f = fx();
  Session s(*f.model, 16, 8);
  try {
    s.prefill(f.prompt);
    FAIL() << "a prompt longer than the context was accepted";
  } catch (const df::Error& e) {
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("-c"), std::string::npos) << e.what();
  }
  std::vector<int32_t> sixteen(f.prompt.begin(), f.prompt.begin() + 16);
  s.prefill(sixteen);
  EXPECT_TRUE(s.context_full());
  EXPECT_THROW(s.decode(5), df::Error);
  std::vector<int32_t> bad{1, 2, 99999};
  EXPECT_THROW(s.prefill(bad), df::Error);
  EXPECT_THROW(Session(*f.model, 0, 8), df::Error);
}

TEST(Generate, StopsAtTheLimitTheStopTokenOrTheContextEnd) {
  auto& f = fx();
  std::vector<int32_t> a(f.prompt.begin(), f.prompt.begin() + 8);
  df::SamplingParams greedy;
  greedy.temperature = 0;
  df::Sampler sampler(f.model->info().n_vocab, greedy);
  Session s(*f.model, 32, 8);
  df::GenerateOptions o;
  o.n_predict = 5;
  auto r = df::generate(s, sampler, a, o);
  EXPECT_EQ(r.tokens.size(), 5u);
  EXPECT_EQ(r.reason, df::StopReason::TokenLimit);
  const int32_t third = r.tokens[2];
  o.is_stop = [&](int32_t t) { return t == third; };
  auto r2 = df::generate(s, sampler, a, o);
  EXPECT_EQ(r2.reason, df::StopReason::EndOfGeneration);
  EXPECT_EQ(r2.tokens.size(), 3u);
  o.is_stop = nullptr;
  o.n_predict = -1;
  auto r3 = df::generate(s, sampler, a, o);
  EXPECT_EQ(r3.reason, df::StopReason::ContextFull);
  EXPECT_EQ(s.tokens().size(), 32u);
}

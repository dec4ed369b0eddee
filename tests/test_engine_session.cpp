#include <gtest/gtest.h>

#include <cstring>

#include "engine/generate.h"
#include "engine/session.h"
#include "error_matchers.h"
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
  for (int i = 10; i < 13; ++i)
    t.prefill(std::span<const int32_t>(f.prompt.data(), static_cast<size_t>(i) + 1));
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
  df::testing::expect_error([&] { s.decode(5); }, {"the context is full (16 tokens)", "-c"});
  std::vector<int32_t> bad{1, 2, 99999};
  df::testing::expect_error([&] { s.prefill(bad); },
                            {"prompt token 99999 at position 2 is outside the vocabulary (0..2047)"});
  df::testing::expect_error([&] { Session(*f.model, 0, 8); }, {"context size -c 0 must be at least 1"});
  df::testing::expect_error([&] { Session(*f.model, 8, 0); }, {"batch size -b 0 must be at least 1"});
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

// A chat's next turn: the state moved on past the prompt (decoded reply tokens), and the new prompt extends
// the old prompt but not the decoded tokens. With the snapshot kept, the session resumes at the end of the
// old prompt and gives the bits of an uninterrupted prefill; without it, it restarts from token 0. For every
// golden architecture (lfm2moe has a short-conv state that the snapshot must carry; gpt-oss a sliding
// window).
TEST(Session, ThePromptSnapshotResumesAfterTheLastPromptWithTheSameBits) {
  for (const char* name :
       {"lfm2moe-tiny", "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"}) {
    SCOPED_TRACE(name);
    auto file = df::gguf::File::open(df::testing::golden_path(std::string(name) + ".gguf"));
    auto model = df::models::load_model(file, {});
    const auto prompt =
        df::testing::golden_json(name)["generation"][1]["prompt_ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> a(prompt.begin(), prompt.begin() + 24);
    const std::vector<int32_t> ab(prompt.begin(), prompt.begin() + 40);

    Session chat(*model, 64, 16);
    chat.keep_prompt_snapshot();
    chat.prefill(a);
    for (int32_t t : {prompt[30], prompt[31], prompt[32]}) chat.decode(t);  // a "reply" that ab does not hold
    auto resumed = copy(chat.prefill(ab));
    EXPECT_EQ(chat.stats().snapshot_resumes, 1);
    EXPECT_EQ(chat.stats().restarts, 0);
    EXPECT_EQ(chat.stats().tokens_reused, 24);
    EXPECT_EQ(chat.stats().tokens_evaluated, 16);
    EXPECT_EQ(chat.tokens(), ab);

    Session straight(*model, 64, 16);
    straight.prefill(a);
    auto want = copy(straight.prefill(ab));  // the same chunks: [0, 16) [16, 24) then [24, 40)
    ASSERT_EQ(resumed.size(), want.size());
    EXPECT_EQ(std::memcmp(resumed.data(), want.data(), want.size() * sizeof(float)), 0);

    // Decoding on from the resumed state agrees too (the restored KV and conv state are the whole sequence).
    auto next_resumed = copy(chat.decode(prompt[40]));
    auto next_want = copy(straight.decode(prompt[40]));
    EXPECT_EQ(std::memcmp(next_resumed.data(), next_want.data(), next_want.size() * sizeof(float)), 0);

    Session plain(*model, 64, 16);
    plain.prefill(a);
    plain.decode(prompt[30]);
    plain.prefill(ab);
    EXPECT_EQ(plain.stats().restarts, 1);
    EXPECT_EQ(plain.stats().tokens_reused, 0);

    // reset() forgets the snapshot: the same prompt again is evaluated from scratch.
    chat.reset();
    chat.prefill(ab);
    EXPECT_EQ(chat.stats().tokens_reused, 0);
    EXPECT_EQ(chat.stats().snapshot_resumes, 1);
  }
}

TEST(Session, AStateOfAnotherModelOrContextIsNotCopied) {
  auto& f = fx();
  auto other_file = df::gguf::File::open(df::testing::golden_path("qwen3moe-tiny.gguf"));
  auto other = df::models::load_model(other_file, {});
  auto mine = f.model->new_state(64), theirs = other->new_state(64), longer = f.model->new_state(128);
  df::testing::expect_error([&] { mine->copy_sequence_from(*theirs); }, {"lfm2moe", "another model"});
  df::testing::expect_error([&] { mine->copy_sequence_from(*longer); }, {"context 128", "context 64"});
}

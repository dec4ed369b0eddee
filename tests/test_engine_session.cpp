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

// Greedy decoding queued ahead of the host (Session::greedy_start; forced on here, where the CPU backend
// would not gain by it): the same tokens and stop reasons as the decode loop, for each way of stopping; the
// session's tokens then also hold a token the loop stopped at (its step was queued before the check), and
// the state decodes on from there to the bits of a fresh prefill of those tokens.
TEST(Generate, GreedyStepsQueuedAheadGiveTheDecodeLoopsTokensAndStops) {
  auto& f = fx();
  std::vector<int32_t> a(f.prompt.begin(), f.prompt.begin() + 8);
  df::SamplingParams greedy;
  greedy.temperature = 0;
  struct Case {
    int n_predict;
    int stop_at;    // index of the generated token to stop at (is_stop), -1: none
    int caller_at;  // index at which on_token says stop, -1: never
    df::StopReason reason;
  };
  const Case cases[] = {
      {5, -1, -1, df::StopReason::TokenLimit},      {1, -1, -1, df::StopReason::TokenLimit},
      {-1, 3, -1, df::StopReason::EndOfGeneration}, {-1, 0, -1, df::StopReason::EndOfGeneration},
      {-1, -1, 2, df::StopReason::Caller},          {-1, -1, -1, df::StopReason::ContextFull}};
  // The loop's tokens, to name the stop tokens by position.
  Session plain_probe(*f.model, 24, 8);
  plain_probe.set_greedy_ahead(false);
  df::Sampler probe_sampler(f.model->info().n_vocab, greedy);
  df::GenerateOptions all;
  all.n_predict = 12;
  const auto reference = df::generate(plain_probe, probe_sampler, a, all).tokens;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "n_predict " << c.n_predict << " stop_at " << c.stop_at
                                    << " caller_at " << c.caller_at);
    df::GenerateOptions o;
    o.n_predict = c.n_predict;
    if (c.stop_at >= 0) o.is_stop = [&](int32_t t) { return t == reference[static_cast<size_t>(c.stop_at)]; };
    int seen = 0;
    if (c.caller_at >= 0) o.on_token = [&](int32_t) { return seen++ < c.caller_at; };
    Session plain(*f.model, 24, 8), ahead(*f.model, 24, 8);
    plain.set_greedy_ahead(false);
    ahead.set_greedy_ahead(true);
    ASSERT_TRUE(ahead.greedy_ahead());
    df::Sampler s1(f.model->info().n_vocab, greedy), s2(f.model->info().n_vocab, greedy);
    seen = 0;
    const auto r1 = df::generate(plain, s1, a, o);
    seen = 0;
    const auto r2 = df::generate(ahead, s2, a, o);
    EXPECT_EQ(r1.reason, c.reason);
    EXPECT_EQ(r2.reason, c.reason);
    EXPECT_EQ(r2.tokens, r1.tokens);
    // The loop decodes every token but the last; queued ahead, a step for the last one ran unless the token
    // limit or the context end held it back.
    std::vector<int32_t> want = plain.tokens();
    const bool last_decoded =
        (c.reason == df::StopReason::EndOfGeneration || c.reason == df::StopReason::Caller) &&
        r1.tokens.size() > 1;
    if (last_decoded) want.push_back(r1.tokens.back());
    EXPECT_EQ(ahead.tokens(), want);
    if (ahead.context_full()) continue;
    // The state holds exactly those tokens: one more decode equals a fresh prefill of them and it.
    const int32_t next = 5;
    const auto decoded = copy(ahead.decode(next));
    std::vector<int32_t> all_tokens = ahead.tokens();
    Session fresh(*f.model, 24, 64);
    EXPECT_EQ(decoded, copy(fresh.prefill(all_tokens)));
  }
}

TEST(Session, GreedyStepsQueuedAheadAreTheArgmaxOfDecodesLogits) {
  auto& f = fx();
  std::vector<int32_t> a(f.prompt.begin(), f.prompt.begin() + 10);
  Session plain(*f.model, 32, 16), ahead(*f.model, 32, 16);
  ahead.set_greedy_ahead(true);
  int32_t t = df::Sampler::argmax(plain.prefill(a));
  const int32_t first = t;
  std::vector<int32_t> want;
  for (int i = 0; i < 6; ++i) {
    t = df::Sampler::argmax(plain.decode(t));
    want.push_back(t);
  }
  ahead.prefill(a);
  ahead.greedy_start(first);
  std::vector<int32_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(ahead.greedy_next(i + 1 < 6));
  ahead.greedy_finish();
  EXPECT_EQ(got, want);
  EXPECT_EQ(ahead.tokens(), plain.tokens());
  // What may not happen during a run, and a run on a session that does not queue ahead.
  ahead.greedy_start(got.back());
  df::testing::expect_error([&] { ahead.prefill(a); }, {"during a greedy run", "greedy_finish()"});
  df::testing::expect_error([&] { ahead.decode(1); }, {"during a greedy run"});
  ahead.greedy_finish();
  EXPECT_EQ(ahead.tokens().size(), plain.tokens().size() + 1);
  df::testing::expect_error([&] { ahead.greedy_next(true); }, {"without a greedy step queued"});
  plain.set_greedy_ahead(false);
  df::testing::expect_error([&] { plain.greedy_start(1); }, {"does not queue greedy steps"});
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

// Sessions advanced together (SessionBatch: one forward for every session's next token or prompt chunk)
// through the engine: with the experts streamed through a small cache, each session's logits are the bits its
// resident run alone gives, and the batch acquires fewer experts than the same sessions decoded one by one
// (shared experts are fetched once); prompt chunks beside decode steps change no bit either. A read error in
// a shared forward fails it with the record named and resets every session it carried; the retry computes
// the resident bits. Bad batches are refused before anything runs.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_source.h"
#include "engine/session.h"
#include "error_matchers.h"
#include "golden_json.h"
#include "streaming_rows.h"

using df::testing::expect_error;
using df::testing::golden_path;
using namespace df::testing::rows;

namespace {

constexpr size_t kSessions = 3;
constexpr int kSteps = 8;

// Three prompts of different lengths cut from the golden tokens, and the tokens each then decodes.
struct Streams {
  std::vector<std::vector<int32_t>> prompts, next;
  explicit Streams(const std::vector<int32_t>& t) {
    const size_t starts[kSessions] = {0, 17, 31}, lengths[kSessions] = {9, 4, 13};
    for (size_t i = 0; i < kSessions; ++i) {
      const auto p = t.begin() + static_cast<std::ptrdiff_t>(starts[i]);
      prompts.emplace_back(p, p + static_cast<std::ptrdiff_t>(lengths[i]));
      next.emplace_back(p + static_cast<std::ptrdiff_t>(lengths[i]),
                        p + static_cast<std::ptrdiff_t>(lengths[i]) + kSteps);
    }
  }
};

// Every session's logits after its prompt and after each decoded token: [session][step] (step 0: the prompt).
using Logits = std::vector<std::vector<std::vector<float>>>;

std::vector<std::unique_ptr<df::Session>> prefilled(df::OpenedModel& m, const Streams& s, Logits& out) {
  std::vector<std::unique_ptr<df::Session>> sessions;
  out.assign(kSessions, {});
  for (size_t i = 0; i < kSessions; ++i) {
    sessions.push_back(std::make_unique<df::Session>(*m.model, 64, m.prefill_chunk));
    sessions[i]->on_failure = [&m] { m.on_failure(); };
    const auto l = sessions[i]->prefill(s.prompts[i]);
    out[i].emplace_back(l.begin(), l.end());
  }
  return sessions;
}

Logits decode_alone(df::OpenedModel& m, const Streams& s) {
  Logits out;
  auto sessions = prefilled(m, s, out);
  for (int step = 0; step < kSteps; ++step)
    for (size_t i = 0; i < kSessions; ++i) {
      const auto l = sessions[i]->decode(s.next[i][static_cast<size_t>(step)]);
      out[i].emplace_back(l.begin(), l.end());
    }
  return out;
}

Logits decode_together(df::OpenedModel& m, const Streams& s) {
  Logits out;
  auto sessions = prefilled(m, s, out);
  df::SessionBatch batch(kSessions, kSessions);
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < kSessions; ++i)
      batch.add_token(*sessions[i], s.next[i][static_cast<size_t>(step)]);
    batch.run();
    EXPECT_EQ(batch.size(), 0u);
    for (size_t i = 0; i < kSessions; ++i) {
      const auto l = sessions[i]->logits();
      out[i].emplace_back(l.begin(), l.end());
    }
  }
  for (size_t i = 0; i < kSessions; ++i)
    EXPECT_EQ(sessions[i]->tokens().size(), s.prompts[i].size() + kSteps);
  return out;
}

void expect_same_bits(const Logits& got, const Logits& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    for (size_t step = 0; step < want[i].size(); ++step) {
      ASSERT_EQ(got[i][step].size(), want[i][step].size());
      EXPECT_EQ(std::memcmp(got[i][step].data(), want[i][step].data(), want[i][step].size() * sizeof(float)),
                0)
          << "session " << i << " step " << step;
    }
  }
}

uint64_t accesses(const df::OpenedModel& m) { return m.cache->telemetry().total.accesses; }

class SessionBatchGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(SessionBatchGolden, StreamedSessionsTogetherGiveTheirResidentBitsAndShareTheirExperts) {
  const std::string model = GetParam();
  const Streams streams(teacher_forced_prompt(model));
  auto resident_opts = options_for(golden_path(model + ".gguf"));
  resident_opts.resident = true;
  df::OpenedModel resident = df::open_model(resident_opts);
  const Logits want = decode_alone(resident, streams);
  ASSERT_NE(want[0].back(), want[1].back()) << "the sessions must differ, or mixed-up rows would pass";
  expect_same_bits(decode_together(resident, streams), want);

  const std::string store = ingest_once(model);
  uint64_t record_bytes = 0;
  {
    df::OpenedModel probe = df::open_model(options_for(store));
    record_bytes = probe.store->layout().record_bytes;
  }
  const auto& info = resident.model->info();
  for (uint64_t slots : {static_cast<uint64_t>(info.n_expert_used), static_cast<uint64_t>(info.n_expert)})
    for (int lookahead : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << model << " slots " << slots << " lookahead " << lookahead);
      auto o = options_for(store);
      o.expert_cache_bytes = slots * record_bytes;
      o.lookahead = lookahead;
      df::OpenedModel alone = df::open_model(o), together = df::open_model(o);
      expect_same_bits(decode_alone(alone, streams), want);
      expect_same_bits(decode_together(together, streams), want);
      // The prompts ran alone in both: the decode steps acquired fewer experts together.
      EXPECT_LT(accesses(together), accesses(alone));
    }
}

INSTANTIATE_TEST_SUITE_P(TinyGoldens, SessionBatchGolden,
                         ::testing::Values("lfm2moe-tiny", "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny",
                                           "gemma4-tiny", "qwen35moe-tiny"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string name = p.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(SessionBatch, AReadErrorInASharedForwardResetsEverySessionAndTheRetryGivesTheResidentBits) {
  const std::string model = "lfm2moe-tiny";
  const Streams streams(teacher_forced_prompt(model));
  auto resident_opts = options_for(golden_path(model + ".gguf"));
  resident_opts.resident = true;
  df::OpenedModel resident = df::open_model(resident_opts);
  const Logits want = decode_alone(resident, streams);

  const std::string store = ingest_once(model);
  auto o = options_for(store);
  o.lookahead = 0;
  {
    df::OpenedModel probe = df::open_model(o);
    // A cache of one layer's top-k: the batch's step must read.
    o.expert_cache_bytes =
        static_cast<uint64_t>(probe.model->info().n_expert_used) * probe.store->layout().record_bytes;
  }
  uint64_t prompt_reads = 0;
  {
    df::OpenedModel probe = df::open_model(o);
    Logits ignored;
    prefilled(probe, streams, ignored);
    prompt_reads = probe.cache->telemetry().total.reads;
  }
  o.faults.eio_on_read = static_cast<int>(prompt_reads);  // the first read after the prompts': in the batch
  df::OpenedModel m = df::open_model(o);
  Logits got;
  auto sessions = prefilled(m, streams, got);
  int failures = 0;
  df::SessionBatch batch(kSessions, kSessions);
  batch.on_failure = [&] {
    ++failures;
    m.on_failure();
  };
  for (size_t i = 0; i < kSessions; ++i) batch.add_token(*sessions[i], streams.next[i][0]);
  expect_error([&] { batch.run(); }, {store + "/experts.bin: MoE layer ", "read failed: Input/output error"});
  EXPECT_EQ(failures, 1);
  for (size_t i = 0; i < kSessions; ++i) EXPECT_TRUE(sessions[i]->tokens().empty()) << "session " << i;
  EXPECT_EQ(batch.size(), 0u);

  // The retry: prompts again, then the decode steps together; the fault does not repeat.
  for (size_t i = 0; i < kSessions; ++i) {
    const auto l = sessions[i]->prefill(streams.prompts[i]);
    EXPECT_EQ(std::memcmp(l.data(), want[i][0].data(), l.size() * sizeof(float)), 0);
  }
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < kSessions; ++i)
      batch.add_token(*sessions[i], streams.next[i][static_cast<size_t>(step)]);
    batch.run();
    for (size_t i = 0; i < kSessions; ++i) {
      const auto l = sessions[i]->logits();
      const auto& w = want[i][static_cast<size_t>(step) + 1];
      EXPECT_EQ(std::memcmp(l.data(), w.data(), w.size() * sizeof(float)), 0) << "session " << i;
    }
  }
}

// A prompt run in chunks beside other sessions' decode steps: the prompt's logits and the decode steps' are
// the bits of each alone, the snapshot is taken at the prompt's end (a next turn resumes from it), and a
// chunk never takes more rows than the forward has left.
TEST(SessionBatch, PromptChunksBesideDecodeStepsGiveTheirAloneBits) {
  const std::string model = "lfm2moe-tiny";
  const Streams streams(teacher_forced_prompt(model));
  auto ro = options_for(golden_path(model + ".gguf"));
  ro.resident = true;
  df::OpenedModel m = df::open_model(ro);
  const Logits want = decode_alone(m, streams);
  const auto& long_prompt = streams.prompts[2];  // 13 tokens
  df::Session alone(*m.model, 64, m.prefill_chunk);
  const auto l = alone.prefill(long_prompt);
  const std::vector<float> want_prompt(l.begin(), l.end());

  Logits got;
  auto sessions = prefilled(m, streams, got);
  df::Session c(*m.model, 64, m.prefill_chunk);
  c.keep_prompt_snapshot();
  ASSERT_EQ(c.begin_prefill(long_prompt), long_prompt.size());
  df::SessionBatch batch(3, 5);  // two decode rows leave 3 for the prompt
  int forwards = 0;
  while (c.prefill_left() > 0) {
    ASSERT_LT(forwards, kSteps);
    for (size_t i = 0; i < 2; ++i)
      batch.add_token(*sessions[i], streams.next[i][static_cast<size_t>(forwards)]);
    const size_t left = c.prefill_left(), n = batch.add_prompt_chunk(c, 100);
    EXPECT_EQ(n, std::min<size_t>(3, left));
    EXPECT_EQ(batch.rows_left(), 3 - n);
    EXPECT_TRUE(batch.full()) << "3 sessions: the batch holds no more";
    batch.run();
    ++forwards;
    for (size_t i = 0; i < 2; ++i) {
      const auto got_l = sessions[i]->logits();
      const auto& w = want[i][static_cast<size_t>(forwards)];
      EXPECT_EQ(std::memcmp(got_l.data(), w.data(), w.size() * sizeof(float)), 0) << "session " << i;
    }
  }
  EXPECT_EQ(forwards, 5);  // 13 tokens, 3 per forward
  EXPECT_EQ(c.tokens(), long_prompt);
  EXPECT_EQ(std::memcmp(c.logits().data(), want_prompt.data(), want_prompt.size() * sizeof(float)), 0);
  // The next turn extends the prompt: it resumes from the snapshot and evaluates only the new tokens.
  c.decode(5);
  std::vector<int32_t> next_turn = long_prompt;
  next_turn.insert(next_turn.end(), {7, 8});
  c.prefill(next_turn);
  EXPECT_EQ(c.stats().snapshot_resumes, 1);
  EXPECT_EQ(c.stats().tokens_evaluated, 2);
}

TEST(SessionBatch, BadBatchesAreRefusedBeforeAnythingRuns) {
  auto ro = options_for(golden_path("lfm2moe-tiny.gguf"));
  ro.resident = true;
  df::OpenedModel m = df::open_model(ro), other = df::open_model(ro);
  df::Session a(*m.model, 8, 8), b(*m.model, 8, 8), c(*other.model, 8, 8);
  const int32_t n_vocab = m.model->info().n_vocab;
  expect_error([&] { df::SessionBatch(0, 4); }, {"at least one session and one token"});
  df::SessionBatch batch(2, 8);
  batch.add_token(a, 1);
  expect_error([&] { batch.add_token(a, 2); }, {"a session was added twice to one batch"});
  expect_error([&] { batch.add_token(c, 2); }, {"sessions of one model"});
  expect_error([&] { batch.add_token(b, n_vocab); },
               {"token " + std::to_string(n_vocab) + " is outside the vocabulary"});
  expect_error([&] { batch.add_prompt_chunk(b, 4); }, {"no prefill under way"});
  batch.add_token(b, 2);
  expect_error([&] { batch.add_token(c, 3); }, {"a session batch holds at most 2 sessions"});
  EXPECT_EQ(batch.size(), 2u);
  batch.clear();
  const std::vector<int32_t> eight = {1, 2, 3, 4, 5, 6, 7, 8};
  a.prefill(eight);
  expect_error([&] { batch.add_token(a, 9); }, {"the context is full (8 tokens)"});
  ASSERT_EQ(b.begin_prefill(std::span<const int32_t>(eight).first(4)), 4u);
  expect_error([&] { batch.add_token(b, 3); }, {"a prefill under way cannot decode yet"});
  df::SessionBatch narrow(2, 3);
  EXPECT_EQ(narrow.add_prompt_chunk(b, 10), 3u);
  EXPECT_EQ(narrow.add_prompt_chunk(b, 10), 0u) << "no rows left";
  narrow.run();
  EXPECT_EQ(b.tokens().size(), 3u);
  EXPECT_EQ(b.prefill_left(), 1u);
  EXPECT_EQ(a.tokens().size(), 8u);
}

}  // namespace

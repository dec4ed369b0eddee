// Sessions decoded together (DecodeBatch: one forward for every session's next token) through the engine:
// with the experts streamed through a small cache, each session's logits are the bits its resident run alone
// gives, and the batch acquires fewer experts than the same sessions decoded one by one (shared experts are
// fetched once). A read error in a shared forward fails it with the record named and resets every session
// it carried; the retry computes the resident bits. Bad batches are refused before anything runs.
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
  df::DecodeBatch batch(kSessions);
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < kSessions; ++i) batch.add(*sessions[i], s.next[i][static_cast<size_t>(step)]);
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

class DecodeBatchGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(DecodeBatchGolden, StreamedSessionsTogetherGiveTheirResidentBitsAndShareTheirExperts) {
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

INSTANTIATE_TEST_SUITE_P(TinyGoldens, DecodeBatchGolden,
                         ::testing::Values("lfm2moe-tiny", "qwen3moe-tiny", "gpt-oss-tiny"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string name = p.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(DecodeBatch, AReadErrorInASharedForwardResetsEverySessionAndTheRetryGivesTheResidentBits) {
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
  df::DecodeBatch batch(kSessions);
  batch.on_failure = [&] {
    ++failures;
    m.on_failure();
  };
  for (size_t i = 0; i < kSessions; ++i) batch.add(*sessions[i], streams.next[i][0]);
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
      batch.add(*sessions[i], streams.next[i][static_cast<size_t>(step)]);
    batch.run();
    for (size_t i = 0; i < kSessions; ++i) {
      const auto l = sessions[i]->logits();
      const auto& w = want[i][static_cast<size_t>(step) + 1];
      EXPECT_EQ(std::memcmp(l.data(), w.data(), w.size() * sizeof(float)), 0) << "session " << i;
    }
  }
}

TEST(DecodeBatch, BadBatchesAreRefusedBeforeAnythingRuns) {
  auto ro = options_for(golden_path("lfm2moe-tiny.gguf"));
  ro.resident = true;
  df::OpenedModel m = df::open_model(ro), other = df::open_model(ro);
  df::Session a(*m.model, 8, 8), b(*m.model, 8, 8), c(*other.model, 8, 8);
  const int32_t n_vocab = m.model->info().n_vocab;
  df::DecodeBatch batch(2);
  batch.add(a, 1);
  expect_error([&] { batch.add(a, 2); }, {"a session was added twice to one decode batch"});
  expect_error([&] { batch.add(c, 2); }, {"sessions of one model"});
  expect_error([&] { batch.add(b, n_vocab); },
               {"token " + std::to_string(n_vocab) + " is outside the vocabulary"});
  batch.add(b, 2);
  expect_error([&] { batch.add(c, 3); }, {"a decode batch holds at most 2 sessions"});
  EXPECT_EQ(batch.size(), 2u);
  batch.clear();
  const std::vector<int32_t> eight = {1, 2, 3, 4, 5, 6, 7, 8};
  a.prefill(eight);
  expect_error([&] { batch.add(a, 9); }, {"the context is full (8 tokens)"});
  batch.add(b, 2);
  batch.run();
  EXPECT_EQ(b.tokens().size(), 1u);
  EXPECT_EQ(a.tokens().size(), 8u);
}

}  // namespace

// Several sequences in one forward (Model::forward_many), on each golden tiny model (lfm2moe, qwen3moe,
// gpt-oss): each sequence's logits and state are the bits it gets alone, whatever shares its batch (prompts
// of different lengths, decode steps beside a prefill chunk, gpt-oss's sliding window crossed); each chosen
// expert is acquired once per layer for the whole batch; the routing sink hears each sequence at its own
// positions; a bad batch is refused before any state changes; a warm batched decode allocates nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "error_matchers.h"
#include "models/model.h"
#include "models_test_util.h"
#include "util/error.h"

namespace df::models {
namespace {

using test_util::RecordingProvider;

const test_util::GoldenModel kLfm2Moe{"lfm2moe-tiny", "lfm2moe"};
const test_util::GoldenModel kQwen3Moe{"qwen3moe-tiny", "qwen3moe"};
const test_util::GoldenModel kGptOss{"gpt-oss-tiny", "gpt-oss"};

struct Named {
  std::string name;
  const test_util::GoldenModel* model;
};
void PrintTo(const Named& n, std::ostream* os) { *os << n.name; }

class Sequences : public ::testing::TestWithParam<Named> {
 protected:
  const test_util::GoldenModel& tiny() const { return *GetParam().model; }
};

// One sequence's share of a step: its next n tokens, with every row's logits or the last one's.
struct Chunk {
  size_t seq, n;
  bool all_rows;
};
using Schedule = std::vector<std::vector<Chunk>>;

// Three token streams cut from the golden tokens (different lengths of shared history: their routings
// differ).
std::vector<std::vector<int32_t>> three_streams(const std::vector<int32_t>& t) {
  std::vector<int32_t> c(t.rbegin(), t.rend());
  return {std::vector<int32_t>(t.begin(), t.end()), std::vector<int32_t>(t.begin() + 20, t.end()), c};
}

// Runs the schedule, each step as one forward_many (together) or each chunk as its own forward (alone), and
// returns every chunk's logits in schedule order, then one more token decoded alone on each state (so that
// the states, not only the logits, are compared).
std::vector<std::vector<float>> run_schedule(Model& m, const std::vector<std::vector<int32_t>>& streams,
                                             const Schedule& schedule, bool together) {
  const size_t V = static_cast<size_t>(m.info().n_vocab);
  std::vector<std::unique_ptr<ModelState>> states;
  for (size_t i = 0; i < streams.size(); ++i) states.push_back(m.new_state(64));
  std::vector<size_t> at(streams.size(), 0);
  std::vector<std::vector<float>> out;
  for (const auto& step : schedule) {
    std::vector<SequenceStep> steps;
    const size_t first = out.size();
    for (const Chunk& c : step) {
      out.emplace_back((c.all_rows ? c.n : 1) * V);
      const auto tokens = std::span<const int32_t>(streams[c.seq]).subspan(at[c.seq], c.n);
      at[c.seq] += c.n;
      steps.push_back({states[c.seq].get(), tokens, {}, c.all_rows});
    }
    for (size_t i = 0; i < steps.size(); ++i) steps[i].logits = out[first + i];
    if (together) {
      m.forward_many(steps);
    } else {
      for (const auto& s : steps) m.forward(*s.state, s.tokens, s.logits, s.all_rows);
    }
  }
  for (size_t i = 0; i < states.size(); ++i) {
    out.emplace_back(V);
    m.forward(*states[i], std::span<const int32_t>(streams[i]).subspan(at[i], 1), out.back(), false);
  }
  return out;
}

TEST_P(Sequences, RunTogetherEachGetsItsAloneBits) {
  auto m = load_model(tiny().file(), {});
  const auto streams = three_streams(tiny().teacher_forced_tokens());
  Schedule schedule;
  schedule.push_back({{0, 7, true}, {1, 3, false}});                 // two prompts of different lengths
  schedule.push_back({{1, 1, false}, {2, 9, true}, {0, 1, false}});  // a new prompt beside two decode steps
  // 14 decode steps of all three: sequence 0 reaches position 22, past gpt-oss's window of 16.
  for (int i = 0; i < 14; ++i) schedule.push_back({{0, 1, false}, {1, 1, false}, {2, 1, true}});
  schedule.push_back({{2, 1, false}, {0, 5, true}});  // a prompt continued beside a decode step
  const auto alone = run_schedule(*m, streams, schedule, false);
  const auto together = run_schedule(*m, streams, schedule, true);
  ASSERT_EQ(together.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_EQ(together[i], alone[i]) << "chunk " << i;
  // The streams must not all give the same logits, or a batch that mixed up its rows would pass.
  EXPECT_NE(alone[0], alone[1]);
}

// Records what the sink hears: per MoE layer, each call's (first position, rows) and ids.
class RecordingSink final : public RoutingSink {
 public:
  void routed(int moe_layer, int first_pos, std::span<const int32_t> ids, int64_t T, int k) override {
    calls[moe_layer].push_back({first_pos, T, std::vector<int32_t>(ids.begin(), ids.end())});
    EXPECT_EQ(ids.size(), static_cast<size_t>(T * k));
  }
  std::map<int, std::vector<std::tuple<int, int64_t, std::vector<int32_t>>>> calls;
};

TEST_P(Sequences, EachChosenExpertIsAcquiredOncePerLayerForTheWholeBatch) {
  RecordingProvider* rec = nullptr;
  auto m = tiny().load_recording(1, &rec);
  const auto streams = three_streams(tiny().teacher_forced_tokens());
  const int n_moe = static_cast<int>(m->info().moe_layers.size()), K = m->info().n_expert_used;
  const size_t V = static_cast<size_t>(m->info().n_vocab);
  std::vector<std::unique_ptr<ModelState>> states;
  std::vector<std::vector<float>> logits;
  std::vector<SequenceStep> steps;
  const std::vector<size_t> prompt = {6, 2, 11};
  for (size_t i = 0; i < 3; ++i) {
    states.push_back(m->new_state(32));
    logits.emplace_back(V);
    m->forward(*states[i], std::span<const int32_t>(streams[i]).first(prompt[i]), logits[i], false);
  }
  for (size_t i = 0; i < 3; ++i)
    steps.push_back({states[i].get(), std::span<const int32_t>(streams[i]).subspan(prompt[i], 1), logits[i]});
  rec->clear();
  RecordingSink sink;
  m->set_routing_sink(&sink);
  m->forward_many(steps);
  m->set_routing_sink(nullptr);
  EXPECT_EQ(rec->outstanding, 0);
  size_t total = 0, shared = 0;
  for (int l = 0; l < n_moe; ++l) {
    ASSERT_EQ(sink.calls[l].size(), 3u) << "one report per sequence, layer " << l;
    std::set<int32_t> chosen;
    for (size_t i = 0; i < 3; ++i) {
      const auto& [pos, rows, ids] = sink.calls[l][i];
      EXPECT_EQ(pos, static_cast<int>(prompt[i])) << "the sequence's own position";
      EXPECT_EQ(rows, 1);
      chosen.insert(ids.begin(), ids.end());
    }
    for (int32_t e : chosen) EXPECT_EQ((rec->acquired[{l, e}]), 1) << "layer " << l << " expert " << e;
    total += chosen.size();
    shared += static_cast<size_t>(3 * K) - chosen.size();
  }
  EXPECT_EQ(rec->acquired.size(), total);  // nothing acquired that was not chosen
  // Otherwise "once for the batch" could not be told apart from "once per sequence".
  EXPECT_GT(shared, 0u);
}

TEST_P(Sequences, ABadBatchIsRefusedBeforeAnyStateChanges) {
  auto m = load_model(tiny().file(), {});
  auto other = load_model(tiny().file(), {});
  const int32_t n_vocab = m->info().n_vocab;
  const size_t V = static_cast<size_t>(n_vocab);
  auto a = m->new_state(8), b = m->new_state(8), foreign = other->new_state(8);
  std::vector<float> la(V), lb(V), wrong(V + 1);
  const std::vector<int32_t> ok = {1, 2}, bad = {3, n_vocab};
  auto expect_refused = [&](std::vector<SequenceStep> steps, const std::string& what) {
    df::testing::expect_error([&] { m->forward_many(steps); }, {what});
    EXPECT_EQ(a->n_past, 0);
    EXPECT_EQ(b->n_past, 0);
  };
  expect_refused({}, "at least one sequence");
  expect_refused({{a.get(), ok, la}, {a.get(), ok, lb}}, "the same state for sequences 0 and 1");
  expect_refused({{a.get(), ok, la}, {b.get(), bad, lb}}, "is out of range");
  expect_refused({{a.get(), ok, la}, {foreign.get(), ok, lb}}, "another model");
  expect_refused({{a.get(), ok, la}, {b.get(), ok, wrong}}, "logits buffer holds");
  expect_refused({{a.get(), ok, la}, {nullptr, ok, lb}}, "another model");
  m->forward_many(std::vector<SequenceStep>{{a.get(), ok, la}, {b.get(), ok, lb}});
  EXPECT_EQ(a->n_past, 2);
  EXPECT_EQ(b->n_past, 2);
}

TEST_P(Sequences, AWarmBatchedDecodeAllocatesNothing) {
  LoadOptions threaded;
  threaded.n_threads = 2;
  auto m = load_model(tiny().file(), threaded);
  const auto streams = three_streams(tiny().teacher_forced_tokens());
  const size_t V = static_cast<size_t>(m->info().n_vocab);
  std::vector<std::unique_ptr<ModelState>> states;
  std::vector<std::vector<float>> logits;
  for (size_t i = 0; i < 3; ++i) {
    states.push_back(m->new_state(32));
    logits.emplace_back(V);
  }
  std::vector<SequenceStep> steps(3);
  auto decode_all = [&](size_t pos) {
    for (size_t i = 0; i < 3; ++i)
      steps[i] = {states[i].get(), std::span<const int32_t>(streams[i]).subspan(pos, 1), logits[i]};
    m->forward_many(steps);
  };
  for (size_t pos = 0; pos < 3; ++pos) decode_all(pos);
  g_allocations = 0;
  g_counting = true;
  for (size_t pos = 3; pos < 9; ++pos) decode_all(pos);
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
  EXPECT_EQ(states[2]->n_past, 9);
}

INSTANTIATE_TEST_SUITE_P(TinyGoldens, Sequences,
                         ::testing::Values(Named{"lfm2moe_tiny", &kLfm2Moe},
                                           Named{"qwen3moe_tiny", &kQwen3Moe},
                                           Named{"gpt_oss_tiny", &kGptOss}),
                         [](const ::testing::TestParamInfo<Named>& p) { return p.param.name; });

}  // namespace
}  // namespace df::models

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
#include "sequences_rules.h"
#include "util/error.h"

namespace df::models {
namespace {

using test_util::RecordingProvider;
using namespace sequences_rules;

const test_util::GoldenModel kLfm2Moe{"lfm2moe-tiny", "lfm2moe"};
const test_util::GoldenModel kQwen3Moe{"qwen3moe-tiny", "qwen3moe"};
const test_util::GoldenModel kGptOss{"gpt-oss-tiny", "gpt-oss"};
const test_util::GoldenModel kHyV3{"hy_v3-tiny", "hy_v3"};
const test_util::GoldenModel kGemma4{"gemma4-tiny", "gemma4"};
const test_util::GoldenModel kQwen35Moe{"qwen35moe-tiny", "qwen35moe"};

struct Named {
  std::string name;
  const test_util::GoldenModel* model;
};
void PrintTo(const Named& n, std::ostream* os) { *os << n.name; }

class Sequences : public ::testing::TestWithParam<Named> {
 protected:
  const test_util::GoldenModel& tiny() const { return *GetParam().model; }
};

TEST_P(Sequences, RunTogetherEachGetsItsAloneBits) {
  auto m = load_model(tiny().file(), {});
  expect_together_equals_alone(*m, tiny().teacher_forced_tokens(), mixed_schedule());
  expect_together_equals_alone(*m, tiny().teacher_forced_tokens(), decode_schedule());
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
  // Warm means having run these steps before: the backend's scratch grows to the largest step it has seen
  // (the most experts a layer chose), so the same nine steps run once, the states reset, then again.
  for (size_t pos = 0; pos < 9; ++pos) decode_all(pos);
  for (auto& st : states) st->reset();
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
                                           Named{"gpt_oss_tiny", &kGptOss}, Named{"hy_v3_tiny", &kHyV3},
                                           Named{"gemma4_tiny", &kGemma4},
                                           Named{"qwen35moe_tiny", &kQwen35Moe}),
                         [](const ::testing::TestParamInfo<Named>& p) { return p.param.name; });

}  // namespace
}  // namespace df::models

#pragma once
// What every backend must keep when sequences share forwards (Model::forward_many): a schedule of prompts and
// decode steps of three sequences, run together and alone, gives each sequence the same bits. Shared by
// test_models_sequences (CPU) and test_models_cuda_sequences (GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "models/model.h"

namespace df::models::sequences_rules {

// One sequence's share of a step: its next n tokens, with every row's logits or the last one's.
struct Chunk {
  size_t seq, n;
  bool all_rows;
};
using Schedule = std::vector<std::vector<Chunk>>;

// Three token streams cut from the golden tokens (different lengths of shared history: their routings
// differ).
inline std::vector<std::vector<int32_t>> three_streams(const std::vector<int32_t>& t) {
  std::vector<int32_t> c(t.rbegin(), t.rend());
  return {std::vector<int32_t>(t.begin(), t.end()), std::vector<int32_t>(t.begin() + 20, t.end()), c};
}

// Runs the schedule, each step as one forward_many (together) or each chunk as its own forward (alone), and
// returns every chunk's logits in schedule order, then one more token decoded alone on each state (so that
// the states, not only the logits, are compared).
inline std::vector<std::vector<float>> run_schedule(Model& m,
                                                    const std::vector<std::vector<int32_t>>& streams,
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

// Prompts of different lengths in one forward, a new prompt beside decode steps, 14 decode steps of all three
// (sequence 0 reaches position 22, past gpt-oss's window of 16), a prompt continued beside a decode step.
inline Schedule mixed_schedule() {
  Schedule schedule;
  schedule.push_back({{0, 7, true}, {1, 3, false}});
  schedule.push_back({{1, 1, false}, {2, 9, true}, {0, 1, false}});
  for (int i = 0; i < 14; ++i) schedule.push_back({{0, 1, false}, {1, 1, false}, {2, 1, true}});
  schedule.push_back({{2, 1, false}, {0, 5, true}});
  return schedule;
}

// Each prompt in a forward of its own, then 14 decode steps of all three together, then a prompt continued
// alone: shared forwards of 3 rows only.
inline Schedule decode_schedule() {
  Schedule schedule = {{{0, 7, true}}, {{1, 3, false}}, {{2, 9, true}}};
  for (int i = 0; i < 14; ++i) schedule.push_back({{0, 1, false}, {1, 1, false}, {2, 1, true}});
  schedule.push_back({{0, 5, true}});
  return schedule;
}

// The largest |logit difference| between the schedule run together and alone (every chunk's logits and each
// state afterwards); 0 means the same bits. Fails the test when the runs' shapes differ, or when the streams
// give the same logits (a batch that mixed up its rows would then pass).
inline float together_vs_alone(Model& m, const std::vector<int32_t>& tokens, const Schedule& schedule) {
  const auto streams = three_streams(tokens);
  const auto alone = run_schedule(m, streams, schedule, false);
  const auto together = run_schedule(m, streams, schedule, true);
  EXPECT_EQ(together.size(), alone.size());
  EXPECT_NE(alone[0], alone[1]);
  float worst = 0;
  for (size_t i = 0; i < std::min(alone.size(), together.size()); ++i) {
    EXPECT_EQ(together[i].size(), alone[i].size());
    for (size_t j = 0; j < std::min(alone[i].size(), together[i].size()); ++j) {
      const float d = std::abs(together[i][j] - alone[i][j]);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
  }
  return worst;
}

// Every chunk's logits and each state afterwards equal, bit for bit, between the runs together and alone.
inline void expect_together_equals_alone(Model& m, const std::vector<int32_t>& tokens,
                                         const Schedule& schedule) {
  const auto streams = three_streams(tokens);
  const auto alone = run_schedule(m, streams, schedule, false);
  const auto together = run_schedule(m, streams, schedule, true);
  ASSERT_EQ(together.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_EQ(together[i], alone[i]) << "chunk " << i;
  EXPECT_NE(alone[0], alone[1]);
}

}  // namespace df::models::sequences_rules

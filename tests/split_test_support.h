#pragma once
// What the tests of a model split over several backends share (test_models_layer_split.cpp,
// test_models_expert_split.cpp): the golden models, the one-backend model they compare with, and the
// forwards whose bits they compare.
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/model.h"

namespace df::testing {

inline const char* const kSplitGoldenModels[] = {"lfm2moe-tiny",  "lfm2moe-tiny-f16", "qwen3moe-tiny",
                                                 "gpt-oss-tiny",  "hy_v3-tiny",       "gemma4-tiny",
                                                 "qwen35moe-tiny"};

// The test name of a golden model (gtest names take no '-').
inline std::string split_case_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}

// The model on one default (one-thread CPU) backend: what every split is held to.
inline std::unique_ptr<models::Model> whole_model(const gguf::File& file) {
  models::LoadOptions o;
  o.n_threads = 1;
  return models::load_model(file, o);
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The tokens of the golden teacher-forced prompt.
inline std::vector<int32_t> golden_prompt(const std::string& name) {
  return golden_json(name)["teacher_forced"]["tokens"].get<std::vector<int32_t>>();
}

// What a forward with a capture reports, over the whole prompt in one batch.
struct Captured {
  std::vector<float> logits, l_out, weights;
  std::vector<int32_t> ids;
};
inline Captured capture_prompt(models::Model& m, const std::vector<int32_t>& tokens) {
  auto st = m.new_state(static_cast<int>(tokens.size()));
  Captured c;
  c.logits.resize(tokens.size() * static_cast<size_t>(m.info().n_vocab));
  models::ForwardCapture cap;
  cap.want_layers = true;
  m.forward(*st, tokens, c.logits, true, &cap);
  c.l_out = cap.l_out;
  c.ids = cap.expert_ids;
  c.weights = cap.expert_weights;
  return c;
}

// The server's shape: the prompt's halves as two sequences, each prefilled alone, then one decode step of
// both as one batch, then a copy of the first taken before that step continuing as the original did. The
// three last-token logits, in turn.
inline std::vector<float> batched_step_logits(models::Model& m, const std::vector<int32_t>& tokens) {
  const size_t V = static_cast<size_t>(m.info().n_vocab), half = tokens.size() / 2;
  const std::span<const int32_t> a(tokens.data(), half), b(tokens.data() + half, tokens.size() - half);
  const int n_ctx = static_cast<int>(tokens.size());
  auto sa = m.new_state(n_ctx), sb = m.new_state(n_ctx);
  std::vector<float> la(V), lb(V), out;
  m.forward(*sa, a.first(a.size() - 1), la, false);
  m.forward(*sb, b.first(b.size() - 1), lb, false);
  auto snapshot = m.new_state(n_ctx);
  snapshot->copy_sequence_from(*sa);
  const models::SequenceStep steps[] = {{sa.get(), a.last(1), la, false}, {sb.get(), b.last(1), lb, false}};
  m.forward_many(steps);
  out.insert(out.end(), la.begin(), la.end());
  out.insert(out.end(), lb.begin(), lb.end());
  m.forward(*snapshot, a.last(1), la, false);
  out.insert(out.end(), la.begin(), la.end());
  EXPECT_EQ(snapshot->n_past, sa->n_past);
  return out;
}

}  // namespace df::testing

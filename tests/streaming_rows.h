#pragma once
// Runs of a golden model through open_model() with every row kept (logits, per-layer residuals, routing), and
// their bit-for-bit comparison: what the streaming and tier tests hold against the resident model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model_source.h"
#include "engine/sampler.h"
#include "golden_json.h"
#include "store/ingest.h"

namespace df::testing::rows {

using df::testing::golden_json;
using df::testing::golden_path;

inline constexpr int kDecodeSteps = 6;

// Everything a run computes, by position, so that runs with different prefill chunks line up.
struct RunRecord {
  std::vector<float> logits;          // [P][n_vocab]
  std::vector<float> l_out;           // [n_layer][P][n_embd]
  std::vector<int32_t> expert_ids;    // [n_moe][P][k]
  std::vector<float> expert_weights;  // [n_moe][P][k]
  int forwards = 0;
};

// The teacher-forced prompt in chunks of the model's prefill chunk, then greedy decode steps, every row of
// every forward pass kept.
inline RunRecord run_every_row(df::OpenedModel& m, const std::vector<int32_t>& prompt) {
  const auto& info = m.model->info();
  const size_t V = static_cast<size_t>(info.n_vocab), H = static_cast<size_t>(info.n_embd);
  const size_t n_layer = static_cast<size_t>(info.n_layer), n_moe = info.moe_layers.size();
  const size_t K = static_cast<size_t>(info.n_expert_used);
  const size_t P = prompt.size() + kDecodeSteps;
  RunRecord r;
  r.logits.resize(P * V);
  r.l_out.resize(n_layer * P * H);
  r.expert_ids.resize(n_moe * P * K);
  r.expert_weights.resize(n_moe * P * K);

  auto state = m.model->new_state(128);
  df::models::ForwardCapture cap;
  cap.want_layers = true;
  std::vector<float> logits;
  size_t pos = 0;
  auto forward = [&](std::span<const int32_t> tokens) {
    const size_t T = tokens.size();
    logits.assign(T * V, 0.0f);
    m.model->forward(*state, tokens, logits, /*all_rows=*/true, &cap);
    m.on_step(T, 0);
    std::copy(logits.begin(), logits.end(), r.logits.begin() + static_cast<ptrdiff_t>(pos * V));
    for (size_t il = 0; il < n_layer; ++il)
      std::copy_n(cap.l_out.begin() + static_cast<ptrdiff_t>(il * T * H), T * H,
                  r.l_out.begin() + static_cast<ptrdiff_t>((il * P + pos) * H));
    for (size_t l = 0; l < n_moe; ++l) {
      std::copy_n(cap.expert_ids.begin() + static_cast<ptrdiff_t>(l * T * K), T * K,
                  r.expert_ids.begin() + static_cast<ptrdiff_t>((l * P + pos) * K));
      std::copy_n(cap.expert_weights.begin() + static_cast<ptrdiff_t>(l * T * K), T * K,
                  r.expert_weights.begin() + static_cast<ptrdiff_t>((l * P + pos) * K));
    }
    pos += T;
    ++r.forwards;
  };
  const size_t chunk = static_cast<size_t>(m.prefill_chunk);
  for (size_t at = 0; at < prompt.size(); at += chunk)
    forward(std::span<const int32_t>(prompt).subspan(at, std::min(chunk, prompt.size() - at)));
  for (int i = 0; i < kDecodeSteps; ++i) {
    const int32_t next = df::Sampler::argmax(std::span<const float>(logits).last(V));
    forward(std::span<const int32_t>(&next, 1));
  }
  return r;
}

// Empty when a and b hold the same bits; else where they first differ, in units of `row` values.
template <class T>
inline std::string first_difference(const std::vector<T>& a, const std::vector<T>& b, size_t row,
                                    const char* what) {
  if (a.size() != b.size()) return std::string(what) + ": sizes differ";
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0) return "";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0)
      return ::testing::PrintToString(what) + " differ first at row " + std::to_string(i / row) + " column " +
             std::to_string(i % row) + ": " + ::testing::PrintToString(a[i]) + " vs " +
             ::testing::PrintToString(b[i]);
  return "";
}

inline void expect_same_bits(const RunRecord& got, const RunRecord& want, const df::models::ModelInfo& info) {
  const size_t V = static_cast<size_t>(info.n_vocab), H = static_cast<size_t>(info.n_embd);
  const size_t K = static_cast<size_t>(info.n_expert_used);
  EXPECT_EQ(first_difference(got.expert_ids, want.expert_ids, K, "expert ids ([moe layer][position] rows)"),
            "");
  EXPECT_EQ(first_difference(got.expert_weights, want.expert_weights, K, "expert weights"), "");
  EXPECT_EQ(first_difference(got.l_out, want.l_out, H, "residuals ([layer][position] rows)"), "");
  EXPECT_EQ(first_difference(got.logits, want.logits, V, "logits (position rows)"), "");
}

inline std::string ingest_once(const std::string& model) {
  const std::string dir = std::string(DF_TEST_TMP) + "/streaming-stores/" + model;
  df::store::IngestOptions o;
  o.output_dir = dir;
  o.use_index = false;
  o.wait_for_lock = true;  // tests of this file run in parallel processes and share the stores
  return df::store::resolve_store(golden_path(model + ".gguf"), o);
}

inline df::ModelSourceOptions options_for(const std::string& path) {
  df::ModelSourceOptions o;
  o.path = path;
  o.n_threads = 2;
  o.prefill_chunk = 16;
  o.notice = [](const std::string&) {};
  return o;
}

inline std::vector<int32_t> teacher_forced_prompt(const std::string& model) {
  return golden_json(model)["teacher_forced"]["tokens"].get<std::vector<int32_t>>();
}

}  // namespace df::testing::rows

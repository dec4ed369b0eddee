#pragma once
// The comparison rule of golden/README.md as one parametrized GoogleTest suite, for any architecture that
// load_model() dispatches: (1) expert choices per (token, MoE layer), near-ties exempt; (2) per-layer
// residual rel-L2 for the 8-token prompt in one batch; (3) teacher-forced logits of the 60-token prompt in
// one batch, and the same rows through the decode path; (4) greedy generation (prompt in one batch, then
// one token per forward), near-tie exemption at margin <= M unless the JSON says greedy_ids_exact.
//
// A test file includes this header and instantiates the suite:
//   INSTANTIATE_TEST_SUITE_P(Models, MoeGolden, ::testing::Values("qwen3moe-tiny"), golden_test_name);
// With DF_GOLDEN_DEVICE defined (a --device name) the models run on that backend, and every test is skipped,
// with the reason, where that backend cannot be made (no such build, no GPU).
// Each check prints its worst margin so that a run shows how close to the tolerance the engine is.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "gguf/gguf.h"
#include "golden_checks.h"
#include "golden_json.h"
#include "models/model.h"

namespace df::models::golden {

using nlohmann::json;

// One loaded model per golden file, shared by the tests of this process (loading is the slow part).
struct Golden {
  json meta;
  std::unique_ptr<Model> model;
  double T = 0, M = 0, G = 0;
  bool exact_greedy = false;
};

inline Golden& golden(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Golden>> cache;
  auto& slot = cache[name];
  if (!slot) {
    slot = std::make_unique<Golden>();
    std::ifstream in(testing::golden_path(name + ".json"));
    slot->meta = json::parse(in);
    const auto file = gguf::File::open(testing::golden_path(name + ".gguf"));
    LoadOptions options;
#ifdef DF_GOLDEN_DEVICE
    options.backend = backend::make_backend({DF_GOLDEN_DEVICE, 0});
#endif
    slot->model = load_model(file, options);
    const json& tol = slot->meta["tolerance"];
    slot->T = tol["logit_abs"];
    slot->M = tol["argmax_margin"];
    slot->G = tol["routing_gap"];
    slot->exact_greedy = tol.value("greedy_ids_exact", false);
  }
  return *slot;
}

class MoeGolden : public ::testing::TestWithParam<std::string> {
#ifdef DF_GOLDEN_DEVICE
 protected:
  void SetUp() override {
    try {
      backend::make_backend({DF_GOLDEN_DEVICE, 0});
    } catch (const std::exception& e) {
      GTEST_SKIP() << "no " << DF_GOLDEN_DEVICE << " backend here: " << e.what();
    }
  }
#endif
};

// Rules 1 and 2 on the `layers` prompt.
TEST_P(MoeGolden, LayersPromptExpertChoicesAndResiduals) {
  Golden& g = golden(GetParam());
  Model& m = *g.model;
  const json& L = g.meta["layers"];
  const std::vector<int32_t> tokens = L["tokens"];
  const int T = static_cast<int>(tokens.size()), H = m.info().n_embd, K = m.info().n_expert_used;
  const int n_layer = m.info().n_layer, n_moe = static_cast<int>(m.info().moe_layers.size());
  ASSERT_EQ(L["moe_layers"].get<std::vector<int>>(), m.info().moe_layers);

  auto st = m.new_state(T);
  std::vector<float> logits(static_cast<size_t>(T) * m.info().n_vocab);
  ForwardCapture cap;
  cap.want_layers = true;
  m.forward(*st, tokens, logits, true, &cap);

  // (1) Expert sets. A differing set is allowed only where the reference gap is a near-tie; the residual
  // checks then skip that token and the later ones from that layer on.
  const auto ref_topk = read_f32(testing::golden_path(GetParam() + ".topk.f32"));
  ASSERT_EQ(ref_topk.size(), static_cast<size_t>(n_moe * T * K));
  int exempt_layer = n_layer, exempt_token = T, differing = 0;
  double min_gap_checked = 1e9;
  for (int l = 0; l < n_moe; ++l)
    for (int t = 0; t < T; ++t) {
      std::set<int> ref;
      for (int j = 0; j < K; ++j)
        ref.insert(static_cast<int>(ref_topk[static_cast<size_t>((l * T + t) * K + j)]));
      const auto got = as_set(cap.expert_ids.data() + (l * T + t) * K, K);
      const double gap = L["routing_gap"][static_cast<size_t>(l)][static_cast<size_t>(t)];
      if (got == ref) {
        if (gap > g.G) min_gap_checked = std::min(min_gap_checked, gap);
        continue;
      }
      ++differing;
      EXPECT_LE(gap, g.G) << "MoE layer " << m.info().moe_layers[static_cast<size_t>(l)] << " token " << t
                          << ": expert set differs and the reference gap " << gap << " is not a near-tie";
      exempt_layer = std::min(exempt_layer, m.info().moe_layers[static_cast<size_t>(l)]);
      exempt_token = std::min(exempt_token, t);
    }
  std::printf(
      "  %s layers prompt: %d of %d expert sets differ (near-ties only allowed); smallest gap among "
      "the checked ones %.3g (G %.3g)\n",
      GetParam().c_str(), differing, n_moe * T, min_gap_checked, g.G);

  // (2) Residual stream after every layer.
  const auto ref = read_f32(testing::golden_path(GetParam() + ".l_out.f32"));
  ASSERT_EQ(ref.size(), cap.l_out.size());
  expect_finite(cap.l_out.data(), cap.l_out.size(), "residual stream (layers prompt)");
  expect_finite(logits.data(), logits.size(), "logits (layers prompt)");
  const json& tol = g.meta["tolerance"];
  for (int il = 0; il < n_layer; ++il) {
    const int rows = il >= exempt_layer ? exempt_token : T;
    double num = 0, den = 0, worst_tok = 0;
    int worst_t = -1;
    for (int t = 0; t < rows; ++t) {
      double tn = 0, td = 0;
      for (int i = 0; i < H; ++i) {
        const size_t at = static_cast<size_t>((il * T + t) * H + i);
        const double d = double(cap.l_out[at]) - ref[at];
        tn += d * d;
        td += double(ref[at]) * ref[at];
      }
      num += tn;
      den += td;
      const double r = std::sqrt(tn / td);
      if (r > worst_tok) worst_tok = r, worst_t = t;
    }
    const double rel = std::sqrt(num / den);
    const double tol_all = tol["l_out_rel_l2"][static_cast<size_t>(il)];
    const double tol_tok = tol["l_out_token_rel_l2"][static_cast<size_t>(il)];
    std::printf("  %s layer %d: rel-L2 %.3g (tol %.3g), worst token %d %.3g (tol %.3g)\n", GetParam().c_str(),
                il, rel, tol_all, worst_t, worst_tok, tol_tok);
    EXPECT_LE(rel, tol_all) << "layer " << il << " (divergence starts at the first failing layer)";
    EXPECT_LE(worst_tok, tol_tok) << "layer " << il << " token " << worst_t;
  }
}

// Rules 1 and 3 on the teacher-forced prompt.
TEST_P(MoeGolden, TeacherForcedLogitsAndExpertChoices) {
  Golden& g = golden(GetParam());
  Model& m = *g.model;
  const json& tf = g.meta["teacher_forced"];
  const std::vector<int32_t> tokens = tf["tokens"];
  const int T = static_cast<int>(tokens.size()), V = m.info().n_vocab, K = m.info().n_expert_used;
  const auto& moe_layers = m.info().moe_layers;

  auto st = m.new_state(T);
  std::vector<float> logits(static_cast<size_t>(T) * V);
  ForwardCapture cap;
  m.forward(*st, tokens, logits, true, &cap);

  int exempt_from = T, differing = 0;
  for (size_t l = 0; l < moe_layers.size(); ++l)
    for (int t = 0; t < T; ++t) {
      bool tie = false;
      if (same_experts_or_near_tie(cap.expert_ids.data() + (static_cast<int>(l) * T + t) * K, K, tf, l, t,
                                   moe_layers[l], &tie))
        continue;
      ++differing;
      if (tie) exempt_from = std::min(exempt_from, t);
    }
  std::printf("  %s teacher-forced: %d of %zu expert sets differ (%zu reference near-ties)\n",
              GetParam().c_str(), differing, moe_layers.size() * static_cast<size_t>(T),
              tf["routing_near_ties"].size());
  if (exempt_from < T) std::printf("  near-tie flip: positions from %d on are exempt\n", exempt_from);

  const auto ref = read_f32(testing::golden_path(GetParam() + ".tf_logits.f32"));
  ASSERT_EQ(ref.size(), logits.size());
  expect_finite(logits.data(), logits.size(), "teacher-forced logits (all 60 rows, exempt ones too)");
  double worst = 0, smallest_checked_margin = 1e9;
  int worst_pos = -1, checked_argmax = 0;
  for (int p = 0; p < exempt_from; ++p) {
    const float* got = logits.data() + static_cast<size_t>(p) * V;
    const float* want = ref.data() + static_cast<size_t>(p) * V;
    const double d = max_abs_diff(got, want, V);
    if (d > worst) worst = d, worst_pos = p;
    EXPECT_LE(d, g.T) << "position " << p;
    const double margin = tf["margin"][static_cast<size_t>(p)];
    if (margin > g.M) {
      ++checked_argmax;
      smallest_checked_margin = std::min(smallest_checked_margin, margin);
      EXPECT_EQ(argmax(got, V), tf["argmax"][static_cast<size_t>(p)].get<int>())
          << "position " << p << " (reference margin " << margin << ")";
    }
  }
  std::printf(
      "  %s teacher-forced: max |logit diff| %.4g at position %d (T %.3g), %d argmax checks "
      "(smallest reference margin checked %.3g, M %.3g)\n",
      GetParam().c_str(), worst, worst_pos, g.T, checked_argmax, smallest_checked_margin, g.M);
}

// Rules 1 and 3 on the decode path: the first teacher-forced tokens fed one per forward agree with
// llama.cpp's batched rows as well (llama.cpp's own decode and batched paths differ; the tolerance covers
// that spread). The expert choices of each step are checked as in the batched test, with the same near-tie
// exemption: a different set at a reference near-tie ends the logit checks there.
TEST_P(MoeGolden, DecodePathMatchesTeacherForcedRows) {
  Golden& g = golden(GetParam());
  Model& m = *g.model;
  const json& tf = g.meta["teacher_forced"];
  const std::vector<int32_t> tokens = tf["tokens"];
  const int n = 24, V = m.info().n_vocab, K = m.info().n_expert_used;  // 24 > gpt-oss-tiny's window of 16
  const auto& moe_layers = m.info().moe_layers;
  const auto ref = read_f32(testing::golden_path(GetParam() + ".tf_logits.f32"));
  auto st = m.new_state(n);
  std::vector<float> logits(static_cast<size_t>(V));
  ForwardCapture cap;
  double worst = 0;
  int checked = 0;
  for (int p = 0; p < n; ++p) {
    m.forward(*st, std::span<const int32_t>(tokens).subspan(static_cast<size_t>(p), 1), logits, false, &cap);
    ASSERT_EQ(cap.expert_ids.size(), moe_layers.size() * static_cast<size_t>(K));
    bool flipped = false;
    for (size_t l = 0; l < moe_layers.size(); ++l) {
      bool tie = false;
      if (!same_experts_or_near_tie(cap.expert_ids.data() + l * static_cast<size_t>(K), K, tf, l, p,
                                    moe_layers[l], &tie))
        flipped = true;
    }
    if (flipped) {
      std::printf("  near-tie flip at position %d: positions from %d on are exempt\n", p, p);
      break;
    }
    const float* want = ref.data() + static_cast<size_t>(p) * V;
    expect_finite(logits.data(), logits.size(), "decode-path logits at position " + std::to_string(p));
    const double d = max_abs_diff(logits.data(), want, V);
    worst = std::max(worst, d);
    ++checked;
    EXPECT_LE(d, g.T) << "position " << p;
    if (tf["margin"][static_cast<size_t>(p)].get<double>() > g.M) {
      EXPECT_EQ(argmax(logits.data(), V), tf["argmax"][static_cast<size_t>(p)].get<int>())
          << "position " << p;
    }
  }
  std::printf("  %s decode path: max |logit diff| %.4g over %d positions (T %.3g)\n", GetParam().c_str(),
              worst, checked, g.T);
}

// Rule 4: greedy generation, prompt as one batch then one token per forward.
TEST_P(MoeGolden, GreedyGeneration) {
  Golden& g = golden(GetParam());
  Model& m = *g.model;
  const int V = m.info().n_vocab;
  for (const auto& gen : g.meta["generation"]) {
    const std::string name = gen["name"];
    const std::vector<int32_t> prompt = gen["prompt_ids"];
    const std::vector<int32_t> want = gen["generated_ids"];
    const int n = gen["n_predict"];
    auto st = m.new_state(static_cast<int>(prompt.size()) + n);
    std::vector<float> logits(static_cast<size_t>(V));
    m.forward(*st, prompt, logits, false);
    double worst_top5 = 0;
    int matched = 0;
    for (int step = 0; step < n; ++step) {
      const json& s = gen["steps"][static_cast<size_t>(step)];
      worst_top5 =
          std::max(worst_top5, check_top5(logits.data(), V, s, g.T, name + " step " + std::to_string(step)));
      const int id = argmax(logits.data(), V);
      if (id != want[static_cast<size_t>(step)]) {
        const double margin = s["margin"];
        if (g.exact_greedy || margin > g.M) {
          ADD_FAILURE() << name << " step " << step << ": produced " << id << ", reference "
                        << want[static_cast<size_t>(step)] << " (reference margin " << margin << ", M " << g.M
                        << ")";
        } else {
          std::printf("  %s: allowed divergence at step %d (margin %.3g <= M)\n", name.c_str(), step, margin);
        }
        break;
      }
      ++matched;
      if (step + 1 < n) {
        const int32_t next = id;
        m.forward(*st, std::span<const int32_t>(&next, 1), logits, false);
      }
    }
    std::printf("  %s %s: %d/%d steps equal, max top-5 logit diff %.4g (T %.3g)\n", GetParam().c_str(),
                name.c_str(), matched, n, worst_top5, g.T);
  }
}

// Rule 4's logit check over all 32 steps: feeding the reference's own generated ids (instead of ours) keeps
// the sequence llama.cpp decoded, so every step's top-5 logits must be within T and the argmax must agree
// wherever the reference margin > M, even past the step where free-running ids were allowed to part. On
// the `long` case this runs the decode path from position 200 to 231 (gpt-oss-tiny: far past its window).
TEST_P(MoeGolden, GreedyStepsOnTheReferenceIdsThroughTheDecodePath) {
  Golden& g = golden(GetParam());
  Model& m = *g.model;
  const int V = m.info().n_vocab;
  for (const auto& gen : g.meta["generation"]) {
    const std::string name = gen["name"];
    const std::vector<int32_t> prompt = gen["prompt_ids"];
    const std::vector<int32_t> want = gen["generated_ids"];
    const int n = gen["n_predict"];
    auto st = m.new_state(static_cast<int>(prompt.size()) + n);
    std::vector<float> logits(static_cast<size_t>(V));
    m.forward(*st, prompt, logits, false);
    double worst_top5 = 0;
    int argmax_checks = 0;
    for (int step = 0; step < n; ++step) {
      const json& s = gen["steps"][static_cast<size_t>(step)];
      worst_top5 =
          std::max(worst_top5, check_top5(logits.data(), V, s, g.T, name + " step " + std::to_string(step)));
      if (s["margin"].get<double>() > g.M) {
        ++argmax_checks;
        EXPECT_EQ(argmax(logits.data(), V), want[static_cast<size_t>(step)]) << name << " step " << step;
      }
      if (step + 1 < n)
        m.forward(*st, std::span<const int32_t>(&want[static_cast<size_t>(step)], 1), logits, false);
    }
    std::printf(
        "  %s %s on the reference ids: max top-5 logit diff %.4g over %d steps (T %.3g), %d argmax "
        "checks\n",
        GetParam().c_str(), name.c_str(), worst_top5, n, g.T, argmax_checks);
  }
}

}  // namespace df::models::golden

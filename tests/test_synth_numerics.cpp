// Numerical health of synthetic models, measured with an independent float32 forward pass
// (test_synth_forward.h) that is first checked against llama.cpp's logits on the golden models:
// the residual stream grows like the design says (no explosion, no vanishing), logits have the target spread
// and clear winners, the routing subspace holds the token embedding exactly at every layer, and expert
// choices depend on the token and layer only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "golden_json.h"
#include "synth/writer.h"
#include "test_synth_forward.h"

namespace fs = std::filesystem;
namespace syn = df::synth;
using df::test::RefModel;
using df::test::RefOutput;
using df::testing::golden_json;
using df::testing::golden_path;

namespace {

std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(f), {}};
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

struct LogitStats {
  double mean_std = 0;
  std::vector<float> margins;  // top1 - top2, sorted
};

LogitStats logit_stats(const RefOutput& out) {
  LogitStats s;
  for (const auto& lg : out.logits) {
    double m = 0, v = 0;
    for (float x : lg) m += x;
    m /= double(lg.size());
    for (float x : lg) v += (x - m) * (x - m);
    s.mean_std += std::sqrt(v / double(lg.size())) / double(out.logits.size());
    std::vector<float> top = lg;
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
    s.margins.push_back(top[0] - top[1]);
  }
  std::sort(s.margins.begin(), s.margins.end());
  return s;
}

// The golden teacher-forced prompt: 60 tokens of real text, valid in every tiny vocabulary.
std::vector<int> prompt_of(const std::string& golden_model) {
  return golden_json(golden_model)["teacher_forced"]["tokens"].get<std::vector<int>>();
}

void expect_reference_matches_golden(const std::string& model, double max_abs) {
  RefModel m(golden_path(model + ".gguf"));
  const std::vector<int> tokens = prompt_of(model);
  const RefOutput out = m.forward(tokens);
  const std::vector<float> ref = read_f32(golden_path(model + ".tf_logits.f32"));
  ASSERT_EQ(ref.size(), tokens.size() * size_t(m.n_vocab()));
  const auto margins = golden_json(model)["teacher_forced"]["margin"].get<std::vector<double>>();
  const auto argmax = golden_json(model)["teacher_forced"]["argmax"].get<std::vector<int>>();
  double worst = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const auto& lg = out.logits[t];
    for (int v = 0; v < m.n_vocab(); ++v)
      worst = std::max(worst, double(std::fabs(lg[size_t(v)] - ref[t * size_t(m.n_vocab()) + size_t(v)])));
    if (margins[t] > max_abs) {
      EXPECT_EQ(std::max_element(lg.begin(), lg.end()) - lg.begin(), argmax[t]) << "position " << t;
    }
  }
  EXPECT_LE(worst, max_abs);
}

void expect_healthy(const syn::Config& c, const std::string& file) {
  syn::write_model(c, file);
  RefModel m(file);
  std::vector<int> tokens = prompt_of(c.arch == syn::Arch::lfm2moe ? "lfm2moe-tiny" : "qwen3moe-tiny");
  // Repeat the prompt so that every token occurs in two contexts.
  const size_t n = tokens.size();
  tokens.insert(tokens.end(), tokens.begin(), tokens.begin() + long(n / 2));
  const RefOutput out = m.forward(tokens);
  const int H = c.shape.n_embd, R = c.numerics.route_dims;

  // Residual RMS after every layer follows sqrt(embd_std^2 + blocks * block_gain^2) within a factor 2.
  for (int il = 0; il < c.shape.n_layer; ++il) {
    double ss = 0;
    size_t cnt = 0;
    for (const auto& row : out.l_out[size_t(il)])
      for (float v : row) ss += double(v) * v, ++cnt;
    const double rms = std::sqrt(ss / double(cnt));
    const double expected = syn::expected_residual_rms(c.numerics, 2 * (il + 1));
    EXPECT_GT(rms, expected / 2) << "layer " << il << " vanishes";
    EXPECT_LT(rms, expected * 2) << "layer " << il << " explodes";
  }

  // The routing subspace holds exactly the token embedding after every layer.
  const auto& embd = m.weight("token_embd.weight");
  for (int il = 0; il < c.shape.n_layer; ++il)
    for (size_t t = 0; t < tokens.size(); ++t)
      for (int i = H - R; i < H; ++i)
        ASSERT_EQ(out.l_out[size_t(il)][t][size_t(i)], embd[size_t(tokens[t]) * size_t(H) + size_t(i)])
            << "layer " << il << " token " << t << " dim " << i;

  // Logits: the target spread, and a clear winner at most positions.
  const LogitStats ls = logit_stats(out);
  EXPECT_NEAR(ls.mean_std, c.numerics.logit_std, 0.15 * c.numerics.logit_std);
  EXPECT_GT(ls.margins[ls.margins.size() / 2], 1.0) << "median top1-top2 margin";

  // Experts: every layer spreads over most experts; near-ties (gap below the golden tolerance G of the
  // architecture: scores are sigmoids for lfm2moe, softmax probabilities for qwen3moe) are rare.
  const double tie = golden_json(c.arch == syn::Arch::lfm2moe ? "lfm2moe-tiny"
                                                              : "qwen3moe-tiny")["tolerance"]["routing_gap"];
  size_t near_ties = 0, decisions = 0;
  for (size_t l = 0; l < out.experts.size(); ++l) {
    std::set<int> used;
    for (const auto& e : out.experts[l]) used.insert(e.begin(), e.end());
    EXPECT_GE(used.size(), size_t(c.shape.n_expert) / 2) << "MoE layer " << l;
    for (float g : out.routing_gap[l]) near_ties += g <= tie, ++decisions;
  }
  EXPECT_LT(double(near_ties) / double(decisions), 0.05);

  // Expert choices depend on (token, layer): the repeated half of the prompt routes as the first time. With
  // softmax gating the choice is exactly scale-invariant; lfm2moe's selection bias makes it depend on the
  // residual RMS a little, so there allow the odd near-tie.
  size_t same = 0, compared = 0;
  for (size_t l = 0; l < out.experts.size(); ++l)
    for (size_t t = 0; t < n / 2; ++t) {
      ++compared;
      same += out.experts[l][t] == out.experts[l][n + t];
    }
  if (c.arch == syn::Arch::qwen3moe) {
    EXPECT_EQ(same, compared);
  } else {
    EXPECT_GE(double(same) / double(compared), 0.97);
  }
}

std::string tmp_path(const std::string& name) {
  fs::create_directories(DF_TEST_TMP);
  return std::string(DF_TEST_TMP) + "/numerics_" + name;
}

}  // namespace

// The reference forward itself: within llama.cpp's own F16 spread (T = 0.13) on the F16 golden model, and
// within the golden tolerance T on the Q4_0 ones (where llama.cpp quantizes activations and the reference
// does not).
TEST(SyntheticNumerics, ReferenceForwardAgreesWithLlamaCpp) {
  expect_reference_matches_golden("lfm2moe-tiny-f16", 0.13);
  expect_reference_matches_golden("qwen3moe-tiny", 3.2);
}

TEST(SyntheticNumerics, Lfm2moeTinyIsHealthy) {
  expect_healthy(syn::preset(syn::Arch::lfm2moe, "tiny"), tmp_path("lfm2moe.gguf"));
}

TEST(SyntheticNumerics, Qwen3moeTinyIsHealthy) {
  expect_healthy(syn::preset(syn::Arch::qwen3moe, "tiny"), tmp_path("qwen3moe.gguf"));
}

TEST(SyntheticNumerics, DeeperWiderF16ModelIsHealthy) {
  syn::Config c = syn::preset(syn::Arch::lfm2moe, "tiny");
  c.shape.n_layer = 9, c.shape.n_embd = 384, c.shape.n_head = 6, c.shape.head_dim = 64;
  c.shape.attn_layers = {2, 5, 8};
  c.types.matmul = c.types.experts = c.types.token_embd = df::GgmlType::F16;
  c.numerics.route_dims = 32;
  c.seed = 3;
  expect_healthy(c, tmp_path("deep.gguf"));
}

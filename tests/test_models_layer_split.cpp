// A model split over several backends in contiguous ranges of layers (models/layer_split.h), with CPU
// backends standing in for the devices: for every golden architecture and every place the split can fall,
// the logits, the residual stream after each layer and the expert choices are the unsplit model's bits
// (prompt chunks, decode steps, sequences batched together, a state restored from a copy); each stage's ops
// were handed only memory of its own backend (what a GPU of its own requires); each stage loaded only its
// layers' weights (and the routing of the next stage's first MoE layers, which its last ones guess as the
// whole model does); ranges that do not tile the layers are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "error_matchers.h"
#include "forwarding_backend.h"
#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/expert_provider.h"
#include "models/layer_split.h"
#include "models/model.h"
#include "split_test_support.h"

namespace df::models {
namespace {

using df::testing::batched_step_logits;
using df::testing::capture_prompt;
using df::testing::Captured;
using df::testing::every_logit;
using df::testing::expect_error;
using df::testing::ForwardingBackend;
using df::testing::golden_prompt;
using df::testing::kSplitGoldenModels;
using df::testing::same_bits;
using df::testing::split_case_name;
using df::testing::whole_model;

struct Split {
  std::unique_ptr<Model> model;
  std::vector<std::shared_ptr<ForwardingBackend>> devices;  // one per stage
};

// The model split at `bounds` (the first layer of every stage after the first), each stage on a backend of
// its own (a forwarding one over a one-thread CPU backend, so that foreign operands are counted).
Split split_at(const gguf::File& file, const std::vector<int>& bounds) {
  Split s;
  std::vector<LoadOptions> stages;
  for (size_t k = 0; k <= bounds.size(); ++k) {
    LoadOptions o;
    s.devices.push_back(std::make_shared<ForwardingBackend>(backend::make_backend({"cpu", 1})));
    o.backend = s.devices.back();
    o.first_layer = k == 0 ? 0 : bounds[k - 1];
    o.end_layer = k == bounds.size() ? -1 : bounds[k];
    stages.push_back(o);
  }
  s.model = load_layer_split(file, stages);
  return s;
}

class LayerSplit : public ::testing::TestWithParam<const char*> {};

TEST_P(LayerSplit, EveryTwoWaySplitGivesTheWholeModelsBitsAndEachStageTouchesOnlyItsOwnMemory) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  const auto tokens = golden_prompt(name);
  auto one = whole_model(file);
  const int n_layer = one->info().n_layer;
  ASSERT_GE(n_layer, 2);
  const auto want = every_logit(*one, tokens);
  for (int b = 1; b < n_layer; ++b) {
    SCOPED_TRACE("split before layer " + std::to_string(b));
    Split s = split_at(file, {b});
    EXPECT_TRUE(same_bits(every_logit(*s.model, tokens), want));
    for (size_t k = 0; k < s.devices.size(); ++k) {
      // A stage of conv or attention layers and MoE layers norms inside norm_matmul_many and norm_route only.
      auto& calls = s.devices[k]->calls;
      EXPECT_GT(calls["rms_norm"] + calls["norm_matmul_many"] + calls["norm_route"], 0)
          << "stage " << k << " computed nothing";
      for (const auto& [op, n] : s.devices[k]->foreign)
        ADD_FAILURE() << "stage " << k << ": " << op << " was handed " << n
                      << " operands outside its backend's memory";
    }
  }
}

TEST_P(LayerSplit, ThreeStagesReportTheWholeModelsResidualsAndExpertChoices) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  const auto tokens = golden_prompt(name);
  auto one = whole_model(file);
  const int n_layer = one->info().n_layer;
  if (n_layer < 3) GTEST_SKIP() << name << " has " << n_layer << " layers: no three-way split";
  const Captured want = capture_prompt(*one, tokens);
  Split s = split_at(file, {1, n_layer - 1});
  const Captured got = capture_prompt(*s.model, tokens);
  EXPECT_TRUE(same_bits(got.logits, want.logits));
  EXPECT_TRUE(same_bits(got.l_out, want.l_out));
  EXPECT_TRUE(same_bits(got.weights, want.weights));
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(std::count(got.ids.begin(), got.ids.end(), -1), 0) << "a MoE layer's routing was not captured";
}

TEST_P(LayerSplit, SequencesBatchedTogetherAndARestoredCopyMatchTheWholeModel) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  const auto tokens = golden_prompt(name);
  auto one = whole_model(file);
  const int n_layer = one->info().n_layer;
  Split s = split_at(file, {n_layer / 2});
  EXPECT_TRUE(same_bits(batched_step_logits(*s.model, tokens), batched_step_logits(*one, tokens)));
}

// A stage's state holds only its layers' KV and recurrent state, and state_bytes() says so before it is
// allocated (the memory plan sizes a split's caches from it).
TEST_P(LayerSplit, AStagesStateIsItsLayersAndItsSizeIsKnownBeforeItIsAllocated) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  auto one = whole_model(file);
  const int n_layer = one->info().n_layer;
  const int n_ctx = 64, n_batch = 7;
  std::vector<int32_t> prompt(n_batch);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(1 + i % 50);
  std::vector<float> logits(static_cast<size_t>(one->info().n_vocab));
  const auto run = [&](Model& m) {
    auto st = m.new_state(n_ctx);
    m.forward(*st, prompt, logits, false);
    m.forward(*st, std::span<const int32_t>(prompt.data(), 1), logits, false);
    return st->bytes();
  };
  const size_t whole = run(*one);
  for (int b = 1; b < n_layer; ++b) {
    SCOPED_TRACE("split before layer " + std::to_string(b));
    Split s = split_at(file, {b});
    const size_t split = run(*s.model);
    EXPECT_EQ(s.model->state_bytes(n_ctx, n_batch), split);
    EXPECT_GT(split, whole) << "each stage has batch buffers of its own";
  }
}

TEST_P(LayerSplit, EachStageLoadsOnlyItsLayersWeights) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  auto all = std::make_shared<ForwardingBackend>(backend::make_backend({"cpu", 1}));
  LoadOptions o;
  o.backend = all;
  auto one = load_model(file, o);
  Split s = split_at(file, {one->info().n_layer / 2});
  size_t sum = 0;
  for (const auto& d : s.devices) {
    EXPECT_LT(d->weight_bytes, all->weight_bytes);
    sum += d->weight_bytes;
  }
  // Nothing but a tied head's embeddings is loaded twice.
  EXPECT_GE(sum, all->weight_bytes);
  EXPECT_LT(sum, all->weight_bytes + all->weight_bytes / 2);
}

// One read-ahead guess as a provider was given it: the MoE layer, the guessed experts, and which provider
// (the stage whose provider it was; 0 for a whole model).
struct Guess {
  int layer;
  std::vector<int32_t> ids;
  size_t provider;
  bool operator==(const Guess&) const = default;
};
struct GuessLog {
  std::vector<Guess> guesses;
  std::vector<size_t> started;  // the providers start_prefetches() was called on, in turn
};

// Every expert resident, as the default provider holds them, with every guess and start_prefetches() call
// written into a log shared by all the stages' providers.
class GuessRecorder final : public ExpertProvider {
 public:
  GuessRecorder(std::unique_ptr<ExpertProvider> inner, GuessLog& log, size_t provider)
      : inner_(std::move(inner)), log_(log), provider_(provider) {}
  void prefetch(int l, std::span<const int32_t> ids) override {
    log_.guesses.push_back({l, std::vector<int32_t>(ids.begin(), ids.end()), provider_});
  }
  void start_prefetches() override { log_.started.push_back(provider_); }
  std::optional<backend::RoutedExperts> resident_stacks(int l) const override {
    return inner_->resident_stacks(l);
  }
  size_t max_held(int l) const override { return inner_->max_held(l); }
  ExpertView acquire(int l, int expert) override { return inner_->acquire(l, expert); }
  void release(int l, int expert) override { inner_->release(l, expert); }

 private:
  std::unique_ptr<ExpertProvider> inner_;
  GuessLog& log_;
  size_t provider_;
};

// Options of a model (or a stage) on a one-thread CPU backend whose provider records into `log`.
LoadOptions recording(GuessLog& log, size_t provider, int first, int end, int lookahead) {
  LoadOptions o;
  auto be = std::shared_ptr<backend::Backend>(backend::make_backend({"cpu", 1}));
  o.backend = be;
  o.first_layer = first;
  o.end_layer = end;
  o.prefetch_lookahead = lookahead;
  o.make_expert_provider = [be, &log, provider, first, end](const gguf::File& f, const ExpertLayout& layout) {
    return std::make_unique<GuessRecorder>(
        std::make_unique<ResidentExpertProvider>(f, layout, *be, first, end), log, provider);
  };
  return o;
}

TEST_P(LayerSplit, TheLastLayersOfAStageGuessTheNextStagesFirstLayersAsTheWholeModelDoes) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  const auto tokens = golden_prompt(name);
  for (int lookahead : {1, 2}) {
    GuessLog whole_log;
    auto whole = load_model(file, recording(whole_log, 0, 0, -1, lookahead));
    const std::vector<float> want = every_logit(*whole, tokens);
    const ModelInfo info = whole->info();
    ASSERT_FALSE(whole_log.guesses.empty()) << "the whole model made no guess";
    for (int b = 1; b < info.n_layer; ++b) {
      SCOPED_TRACE("lookahead " + std::to_string(lookahead) + ", split before layer " + std::to_string(b));
      GuessLog log;
      auto split =
          load_layer_split(file, {recording(log, 0, 0, b, lookahead), recording(log, 1, b, -1, lookahead)});
      EXPECT_TRUE(same_bits(every_logit(*split, tokens), want));
      // The same guesses in the same order, each given to the stage that computes its layer.
      ASSERT_EQ(log.guesses.size(), whole_log.guesses.size());
      for (size_t i = 0; i < log.guesses.size(); ++i) {
        const Guess& g = log.guesses[i];
        EXPECT_EQ(g.layer, whole_log.guesses[i].layer) << "guess " << i;
        EXPECT_EQ(g.ids, whole_log.guesses[i].ids) << "guess " << i << " of MoE layer " << g.layer;
        EXPECT_EQ(g.provider, info.moe_layers[static_cast<size_t>(g.layer)] < b ? 0u : 1u)
            << "guess " << i << " of MoE layer " << g.layer << " went to the other stage's provider";
      }
      // The second stage starts its queued guesses before each of its forwards, the first never.
      EXPECT_EQ(log.started, std::vector<size_t>(log.started.size(), 1u));
      EXPECT_FALSE(log.started.empty());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, LayerSplit, ::testing::ValuesIn(kSplitGoldenModels), split_case_name);

TEST(LayerSplitLoad, RangesThatDoNotTileTheLayersAreClearErrors) {
  const auto file = gguf::File::open(df::testing::golden_path("lfm2moe-tiny.gguf"));
  const int n_layer = whole_model(file)->info().n_layer;
  auto stages = [](std::vector<std::pair<int, int>> ranges) {
    std::vector<LoadOptions> out;
    for (auto [first, end] : ranges) {
      LoadOptions o;
      o.n_threads = 1;
      o.first_layer = first;
      o.end_layer = end;
      out.push_back(o);
    }
    return out;
  };
  expect_error(
      [&] {
        (void)load_layer_split(file, stages({{0, 1}, {2, -1}}));
      },
      {"stage 1 starts at layer 2, where layer 1"});
  expect_error(
      [&] {
        (void)load_layer_split(file, stages({{0, 2}, {1, -1}}));
      },
      {"stage 1 starts at layer 1, where layer 2"});
  expect_error(
      [&] {
        (void)load_layer_split(file, stages({{0, 1}, {1, n_layer - 1}}));
      },
      {"the last stage ends at layer " + std::to_string(n_layer - 1)});
  expect_error(
      [&] {
        (void)load_layer_split(file, stages({{0, -1}, {n_layer, -1}}));
      },
      {"stage 0 reaches the model's last layer"});
  expect_error(
      [&] {
        (void)load_layer_split(file, stages({{0, n_layer + 1}, {n_layer + 1, -1}}));
      },
      {"a stage of a layer split runs at least one of them"});
  expect_error(
      [&] {
        (void)load_layer_split(file, stages({{0, 0}, {0, -1}}));
      },
      {"layers [0, 0) asked of a model of"});
  expect_error([&] { (void)load_layer_split(file, {}); }, {"no stage to load"});
}

TEST(LayerSplitLoad, AStagesExpertsAreOnlyItsOwnLayers) {
  const auto file = gguf::File::open(df::testing::golden_path("qwen3moe-tiny.gguf"));
  LoadOptions o;
  o.n_threads = 1;
  o.end_layer = 1;
  auto first = load_model(file, o);
  EXPECT_NO_THROW(first->experts().acquire(0, 0));
  expect_error([&] { (void)first->experts().acquire(1, 0); },
               {"computed by another stage of the layer split"});
  // A stage's model reports the whole model's shape, and runs only inside the split.
  EXPECT_EQ(first->info().n_layer, whole_model(file)->info().n_layer);
  auto st = first->new_state(8);
  std::vector<float> logits(static_cast<size_t>(first->info().n_vocab));
  const int32_t token = 1;
  expect_error([&] { first->forward(*st, std::span(&token, 1), logits, false); },
               {"qwen3moe: this model computes layers 0-0 of ", "as a stage of a layer split"});
}

TEST(SplitLayers, SharesGiveProportionalContiguousRanges) {
  using R = std::vector<std::pair<int, int>>;
  const double even[] = {1, 1}, thirds[] = {1, 2}, four[] = {24, 24, 48, 48}, one[] = {5};
  EXPECT_EQ(split_layers(24, even), (R{{0, 12}, {12, 24}}));
  EXPECT_EQ(split_layers(24, thirds), (R{{0, 8}, {8, 24}}));
  EXPECT_EQ(split_layers(7, even), (R{{0, 4}, {4, 7}}));  // round half away from zero: 3.5 -> 4
  EXPECT_EQ(split_layers(48, four), (R{{0, 8}, {8, 16}, {16, 32}, {32, 48}}));
  EXPECT_EQ(split_layers(3, one), (R{{0, 3}}));
}

TEST(SplitLayers, SharesThatLeaveADeviceWithoutALayerAreClearErrors) {
  const double tiny[] = {1, 0.01}, three[] = {1, 1, 1}, negative[] = {1, -1}, zero[] = {0, 0};
  expect_error([&] { (void)split_layers(24, tiny); }, {"device 1 gets no layer of 24 with shares 1,0.01"});
  expect_error([&] { (void)split_layers(2, three); }, {"device 1 gets no layer of 2"});
  expect_error([&] { (void)split_layers(24, negative); }, {"share -1 is not a non-negative number"});
  expect_error([&] { (void)split_layers(24, zero); }, {"add up to 0"});
  expect_error([&] { (void)split_layers(24, {}); }, {"no device to split 24 layers over"});
}

}  // namespace
}  // namespace df::models

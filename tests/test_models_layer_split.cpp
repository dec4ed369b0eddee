// A model split over several backends in contiguous ranges of layers (models/layer_split.h), with CPU
// backends standing in for the devices: for every golden architecture and every place the split can fall,
// the logits, the residual stream after each layer and the expert choices are the unsplit model's bits
// (prompt chunks, decode steps, sequences batched together, a state restored from a copy); each stage's ops
// were handed only memory of its own backend (what a GPU of its own requires); each stage loaded only its
// layers' weights; ranges that do not tile the layers are clear errors.
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
      EXPECT_GT(s.devices[k]->calls["rms_norm"], 0) << "stage " << k << " computed nothing";
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

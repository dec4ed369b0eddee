// Every MoE layer's experts spread over several backends (models/expert_parallel.h), with CPU backends
// standing in for the devices: for every golden architecture and several places the split can fall, the
// logits, the residual stream after each layer and the expert choices are the one-backend model's bits
// (prompt chunks, decode steps, sequences batched together); each part's ops were handed only memory of its
// own backend and each part computed experts; each part loaded only its experts; ranges that do not tile the
// experts and experts asked of the wrong part are clear errors.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "error_matchers.h"
#include "forwarding_backend.h"
#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/expert_parallel.h"
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

struct Spread {
  // Declared first, so destroyed last: the model's parts free their experts into these backends.
  std::vector<std::shared_ptr<ForwardingBackend>> devices;  // devices[0] also runs the trunk
  std::unique_ptr<Model> model;
};

// The model with its experts spread over one backend per range (a forwarding one over a one-thread CPU
// backend each, so that foreign operands are counted); the trunk on the first.
Spread spread_over(const gguf::File& file, const std::vector<std::pair<int, int>>& ranges) {
  Spread s;
  std::vector<experts::ExpertPart> parts;
  for (const auto& [first, end] : ranges) {
    s.devices.push_back(std::make_shared<ForwardingBackend>(backend::make_backend({"cpu", 1})));
    parts.push_back({s.devices.back().get(), first, end});
  }
  LoadOptions o;
  o.backend = s.devices.empty() ? std::make_shared<ForwardingBackend>(backend::make_backend({"cpu", 1}))
                                : s.devices.front();
  backend::Backend& trunk = *o.backend;
  o.make_expert_provider = [&trunk, parts](const gguf::File& f, const ExpertLayout& layout) {
    return std::make_unique<ExpertParallelProvider>(f, layout, trunk, parts);
  };
  s.model = load_model(file, o);
  return s;
}

void expect_only_own_memory(const Spread& s) {
  for (size_t k = 0; k < s.devices.size(); ++k)
    for (const auto& [op, n] : s.devices[k]->foreign)
      ADD_FAILURE() << "part " << k << ": " << op << " was handed " << n
                    << " operands outside its backend's memory";
}

class ExpertSplit : public ::testing::TestWithParam<const char*> {};

TEST_P(ExpertSplit, TwoAndThreePartsGiveTheOneBackendBitsAndEachPartTouchesOnlyItsOwnMemory) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  const auto tokens = golden_prompt(name);
  auto one = whole_model(file);
  const int E = one->info().n_expert;
  ASSERT_GE(E, 4);
  const auto want = every_logit(*one, tokens);
  const std::vector<std::vector<std::pair<int, int>>> splits = {{{0, 1}, {1, E}},
                                                                {{0, E / 2}, {E / 2, E}},
                                                                {{0, E - 1}, {E - 1, E}},
                                                                {{0, E / 4}, {E / 4, E / 2}, {E / 2, E}}};
  for (const auto& ranges : splits) {
    SCOPED_TRACE(std::to_string(ranges.size()) + " parts, the second from expert " +
                 std::to_string(ranges[1].first));
    Spread s = spread_over(file, ranges);
    EXPECT_TRUE(same_bits(every_logit(*s.model, tokens), want));
    expect_only_own_memory(s);
    // The trunk ran on the first backend only; every part computed experts (a few prompt tokens route to
    // each range of these models).
    EXPECT_GT(s.devices[0]->calls["rms_norm"] + s.devices[0]->calls["norm_matmul_many"], 0);
    for (size_t k = 0; k < s.devices.size(); ++k) {
      EXPECT_GT(s.devices[k]->calls["ffn"], 0) << "part " << k << " computed no expert";
      if (k > 0) {
        EXPECT_EQ(s.devices[k]->calls["rms_norm"] + s.devices[k]->calls["norm_matmul_many"], 0)
            << "part " << k << " ran trunk ops";
      }
    }
  }
}

TEST_P(ExpertSplit, ResidualsExpertChoicesAndBatchedSequencesMatchTheOneBackendModel) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  const auto tokens = golden_prompt(name);
  auto one = whole_model(file);
  const int E = one->info().n_expert;
  Spread s = spread_over(file, {{0, E / 3}, {E / 3, E}});
  const Captured want = capture_prompt(*one, tokens), got = capture_prompt(*s.model, tokens);
  EXPECT_TRUE(same_bits(got.logits, want.logits));
  EXPECT_TRUE(same_bits(got.l_out, want.l_out));
  EXPECT_TRUE(same_bits(got.weights, want.weights));
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_TRUE(same_bits(batched_step_logits(*s.model, tokens), batched_step_logits(*one, tokens)));
  expect_only_own_memory(s);
}

TEST_P(ExpertSplit, EachPartLoadsOnlyItsExperts) {
  const std::string name = GetParam();
  const auto file = gguf::File::open(df::testing::golden_path(name + ".gguf"));
  auto all = std::make_shared<ForwardingBackend>(backend::make_backend({"cpu", 1}));
  LoadOptions o;
  o.backend = all;
  auto one = load_model(file, o);
  const int E = one->info().n_expert;
  Spread s = spread_over(file, {{0, E / 2}, {E / 2, E}});
  // The first part holds the trunk and half the experts, the second only its half: together what the one
  // backend holds (the trunk once, every expert once).
  EXPECT_LT(s.devices[1]->weight_bytes, all->weight_bytes / 2);
  EXPECT_EQ(s.devices[0]->weight_bytes + s.devices[1]->weight_bytes, all->weight_bytes);
}

INSTANTIATE_TEST_SUITE_P(Golden, ExpertSplit, ::testing::ValuesIn(kSplitGoldenModels), split_case_name);

TEST(ExpertSplitLoad, RangesThatDoNotTileTheExpertsAndExpertsOfAnotherPartAreClearErrors) {
  const auto file = gguf::File::open(df::testing::golden_path("qwen3moe-tiny.gguf"));
  const int E = whole_model(file)->info().n_expert;
  auto spread = [&](std::vector<std::pair<int, int>> ranges) { (void)spread_over(file, ranges); };
  expect_error([&] { spread({{0, 2}, {3, E}}); }, {"part 1 holds experts 3-", "where expert 2 follows"});
  expect_error([&] { spread({{0, 2}, {1, E}}); }, {"part 1 holds experts 1-", "where expert 2 follows"});
  expect_error(
      [&] {
        spread({{0, 2}, {2, E - 1}});
      },
      {"the parts hold experts 0-" + std::to_string(E - 2) + " of each layer's " + std::to_string(E)});
  expect_error(
      [&] {
        spread({{0, 2}, {2, E + 1}});
      },
      {"the parts hold experts 0-" + std::to_string(E) + " of each layer's " + std::to_string(E)});
  expect_error([&] { spread({}); }, {"no part to hold the experts"});

  auto cpu = backend::make_backend({"cpu", 1});
  LoadOptions o;
  o.backend = cpu;
  o.make_expert_provider = [&](const gguf::File& f, const ExpertLayout& layout) {
    return std::make_unique<ResidentExpertProvider>(f, layout, *cpu,
                                                    ResidentExpertProvider::ExpertRange{2, 4});
  };
  auto part = load_model(file, o);
  EXPECT_NO_THROW(part->experts().acquire(0, 3));
  expect_error([&] { (void)part->experts().acquire(0, 4); },
               {"expert 4 of MoE layer 0 lives in another part of the expert split (this one holds 2-3)"});
  EXPECT_FALSE(part->experts().resident_stacks(0).has_value());
  expect_error([&] { (void)whole_model(file)->experts().part_copy(0, {}); },
               {"part_copy() for part 0 of a provider whose experts are not spread"});
}

TEST(SplitItems, ExpertSharesGiveProportionalRangesAndNameTheExperts) {
  const std::vector<double> even = {1, 1}, skewed = {3, 1}, none = {1, 0};
  EXPECT_EQ(split_items(8, even, "expert"), (std::vector<std::pair<int, int>>{{0, 4}, {4, 8}}));
  EXPECT_EQ(split_items(8, skewed, "expert"), (std::vector<std::pair<int, int>>{{0, 6}, {6, 8}}));
  expect_error([&] { (void)split_items(8, none, "expert"); },
               {"expert split: device 1 gets no expert of 8 with shares 1,0"});
}

}  // namespace
}  // namespace df::models

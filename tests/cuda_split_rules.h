#pragma once
// The layer split (models/layer_split.h) and the expert split (models/expert_parallel.h) on CUDA devices:
// for every golden architecture and every split point, the split's logits are the one-GPU model's bits, and
// each stage's (part's) ops were handed only memory of its own device. The second stage runs on
// DF_SPLIT_SECOND: "cuda:0" (test_models_cuda_split.cpp: one GPU standing in for two, label gpu) or "cuda:1"
// (test_models_multigpu.cpp, label multigpu: skipped, saying why, on a machine with fewer GPUs). Every test
// skips with the reason where there is no GPU or the build has no CUDA.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "forwarding_backend.h"
#include "gguf/gguf.h"
#include "golden_json.h"
#include "models/expert_parallel.h"
#include "models/layer_split.h"
#include "models/model.h"

#if !defined(DF_SPLIT_SECOND)
#error "define DF_SPLIT_SECOND before including cuda_split_rules.h"
#endif

namespace df::models {
namespace {

using df::testing::every_logit;
using df::testing::ForwardingBackend;

struct Case {
  const char* model;
  const char* second;  // the second stage's device
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " split onto cuda:0 and " << c.second; }

// The second device's backend, or why there is none.
std::shared_ptr<backend::Backend> cuda_or_reason(const std::string& device, std::string& reason) {
  try {
    const auto all = backend::device_list("cuda:all");
    if (device != "cuda:0" && all.size() < 2) {
      reason = "this machine has " + std::to_string(all.size()) + " GPU: " + device + " needs two";
      return nullptr;
    }
    return backend::make_backend({device, 1});
  } catch (const Error& e) {
    reason = e.what();
    return nullptr;
  }
}

// A golden model on one GPU: its file, the teacher-forced tokens and every logit of them.
struct OneGpu {
  gguf::File file;
  std::vector<int32_t> tokens;
  ModelInfo info;
  std::vector<float> logits;
};
OneGpu one_gpu(const char* model) {
  OneGpu r{gguf::File::open(df::testing::golden_path(std::string(model) + ".gguf")),
           df::testing::golden_json(model)["teacher_forced"]["tokens"].get<std::vector<int32_t>>(),
           {},
           {}};
  LoadOptions o;
  // Behind the same forwarding backend as the split's devices: it sets max_routed_tokens (8), which picks
  // between the routed op and grouped FFNs, whose bits may differ on a GPU for batches of several rows.
  o.backend = std::make_shared<ForwardingBackend>(backend::make_backend({"cuda:0", 1}));
  auto one = load_model(r.file, o);
  r.info = one->info();
  r.logits = every_logit(*one, r.tokens);
  return r;
}

class CudaLayerSplit : public ::testing::TestWithParam<Case> {};

TEST_P(CudaLayerSplit, EverySplitPointGivesTheOneGpuBitsAndEachStageTouchesOnlyItsOwnMemory) {
  const Case c = GetParam();
  std::string reason;
  if (!cuda_or_reason("cuda:0", reason) || !cuda_or_reason(c.second, reason)) GTEST_SKIP() << reason;
  const OneGpu ref = one_gpu(c.model);
  const gguf::File& file = ref.file;
  const std::vector<int32_t>& tokens = ref.tokens;
  const std::vector<float>& want = ref.logits;
  const int n_layer = ref.info.n_layer;
  for (int b = 1; b < n_layer; ++b) {
    SCOPED_TRACE("split before layer " + std::to_string(b));
    std::vector<std::shared_ptr<ForwardingBackend>> devices;
    std::vector<LoadOptions> stages;
    for (const char* d : {"cuda:0", c.second}) {
      devices.push_back(std::make_shared<ForwardingBackend>(backend::make_backend({d, 1})));
      LoadOptions s;
      s.backend = devices.back();
      s.first_layer = stages.empty() ? 0 : b;
      s.end_layer = stages.empty() ? b : -1;
      stages.push_back(s);
    }
    auto split = load_layer_split(file, stages);
    const auto got = every_logit(*split, tokens);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
    for (size_t k = 0; k < devices.size(); ++k)
      for (const auto& [op, n] : devices[k]->foreign)
        ADD_FAILURE() << "stage " << k << ": " << op << " was handed " << n << " operands outside its device";
  }
}

// The expert split (models/expert_parallel.h): the trunk and the first part of every layer's experts on
// cuda:0, the rest on the second device; the logits are the one-GPU model's bits at each boundary tried
// (the one-GPU model decodes with the routed op, the split with grouped FFNs: Backend::routed_ffn's promise
// that both give the same rows is tested here too).
class CudaExpertSplit : public ::testing::TestWithParam<Case> {};

TEST_P(CudaExpertSplit, ExpertsOnTwoDevicesGiveTheOneGpuBitsAndEachPartTouchesOnlyItsOwnMemory) {
  const Case c = GetParam();
  std::string reason;
  if (!cuda_or_reason("cuda:0", reason) || !cuda_or_reason(c.second, reason)) GTEST_SKIP() << reason;
  const OneGpu ref = one_gpu(c.model);
  const gguf::File& file = ref.file;
  const std::vector<int32_t>& tokens = ref.tokens;
  const std::vector<float>& want = ref.logits;
  const int E = ref.info.n_expert;
  for (int b : {1, E / 2, E - 1}) {
    SCOPED_TRACE("second part from expert " + std::to_string(b));
    std::vector<std::shared_ptr<ForwardingBackend>> devices;
    std::vector<experts::ExpertPart> parts;
    for (const char* d : {"cuda:0", c.second}) {
      devices.push_back(std::make_shared<ForwardingBackend>(backend::make_backend({d, 1})));
      parts.push_back({devices.back().get(), parts.empty() ? 0 : b, parts.empty() ? b : E});
    }
    LoadOptions s;
    s.backend = devices.front();
    backend::Backend& trunk = *devices.front();
    s.make_expert_provider = [&trunk, parts](const gguf::File& f, const ExpertLayout& layout) {
      return std::make_unique<ExpertParallelProvider>(f, layout, trunk, parts);
    };
    auto split = load_model(file, s);
    const auto got = every_logit(*split, tokens);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
    for (size_t k = 0; k < devices.size(); ++k) {
      EXPECT_GT(devices[k]->calls["ffn"], 0) << "part " << k << " computed no expert";
      for (const auto& [op, n] : devices[k]->foreign)
        ADD_FAILURE() << "part " << k << ": " << op << " was handed " << n << " operands outside its device";
    }
  }
}

std::vector<Case> cases(const char* second) {
  std::vector<Case> out;
  for (const char* m : {"lfm2moe-tiny", "lfm2moe-tiny-f16", "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny",
                        "gemma4-tiny", "qwen35moe-tiny"})
    out.push_back({m, second});
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = std::string(info.param.model) + "_on_" + info.param.second;
  for (char& ch : s)
    if (ch == '-' || ch == ':') ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Split, CudaLayerSplit, ::testing::ValuesIn(cases(DF_SPLIT_SECOND)), case_name);
INSTANTIATE_TEST_SUITE_P(Split, CudaExpertSplit, ::testing::ValuesIn(cases(DF_SPLIT_SECOND)), case_name);

}  // namespace
}  // namespace df::models

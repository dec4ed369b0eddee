#pragma once
// gpt-oss's GGUF vocabulary, read by the loader (gpt_oss_config.cpp, gpt_oss_load.cpp): the architecture
// name, the gating it routes with, and every tensor the model binds for a given config
// (ARCHITECTURES.md 7.3). make-model has no gpt-oss generator; one would write this list.
#include <cstdint>
#include <string_view>
#include <vector>

#include "models/gpt_oss.h"
#include "models/tensor_desc.h"

namespace df::models {

inline constexpr std::string_view kGptOssArch = "gpt-oss";
inline constexpr int64_t kGptOssSoftmaxWeightGating = 3;  // gpt-oss.expert_gating_func, when present

// token_embd, output_norm, the head (never tied), then per layer the biased attention with its sinks, the
// router and its bias, the per-expert biases (resident with the trunk) and the expert matrices.
std::vector<TensorDesc> gpt_oss_tensors(const GptOssConfig& c);

}  // namespace df::models

#pragma once
// hy_v3's GGUF vocabulary, read by the loader (hy_v3_config.cpp, hy_v3_load.cpp) and written by make-model
// (src/synth/): the architecture name, its gating values, and every tensor the model binds for a given
// config (ARCHITECTURES.md 6.2).
#include <cstdint>
#include <string_view>
#include <vector>

#include "models/hy_v3.h"
#include "models/tensor_desc.h"

namespace df::models {

inline constexpr std::string_view kHyV3Arch = "hy_v3";
// hy_v3.expert_gating_func: llama.cpp reads 0 (or no key) as sigmoid, the converter writes 2.
inline constexpr int64_t kHyV3SoftmaxGating = 1;
inline constexpr int64_t kHyV3SigmoidGating = 2;

// In llama.cpp's load order: token_embd, output_norm, the head (optional: token_embd when absent), then per
// layer attention with its QK norms, the FFN norm, and the dense FFN or the router, selection bias (optional,
// named without a .bias suffix), routed experts and shared expert. Trailing MTP blocks are not described.
std::vector<TensorDesc> hy_v3_tensors(const HyV3Config& c);

}  // namespace df::models

#pragma once
// qwen3moe's GGUF vocabulary, read by the loader (qwen3moe_config.cpp, qwen3moe_load.cpp) and written by
// make-model (src/synth/): the architecture name, the gating it routes with, and every tensor the model
// binds for a given config (ARCHITECTURES.md 2.2).
#include <cstdint>
#include <string_view>
#include <vector>

#include "models/qwen3moe.h"
#include "models/tensor_desc.h"

namespace df::models {

inline constexpr std::string_view kQwen3MoeArch = "qwen3moe";
inline constexpr int64_t kQwen3MoeSoftmaxGating = 1;  // qwen3moe.expert_gating_func, when present

// In the golden fixtures' file order: token_embd, output_norm, the head (optional: token_embd when absent),
// then per layer attention (K norm before Q norm, as llama.cpp's conversion writes them) and the experts.
std::vector<TensorDesc> qwen3moe_tensors(const Qwen3MoeConfig& c);

}  // namespace df::models

#pragma once
// gemma4's GGUF vocabulary, read by the loader (gemma4_config.cpp, gemma4_load.cpp) and written by make-model
// (src/synth/): the architecture name and every tensor the model binds for a given config (ARCHITECTURES.md
// 4.2).
#include <string_view>
#include <vector>

#include "models/gemma4.h"
#include "models/tensor_desc.h"

namespace df::models {

inline constexpr std::string_view kGemma4Arch = "gemma4";

// In llama.cpp's load order: the head (optional: token_embd when absent), token_embd, output_norm, the global
// layers' rope_freqs (when a global layer exists), then per layer attention (V optional: without it the K
// projection is V), its norms and output scale, the dense GeGLU branch, and on MoE layers the router with its
// input scale, the branch norms and the experts with their per-expert output scale (optional).
std::vector<TensorDesc> gemma4_tensors(const Gemma4Config& c);

}  // namespace df::models

#pragma once
// qwen35moe's GGUF vocabulary, read by the loader (qwen35moe_config.cpp, qwen35moe_load.cpp) and written by
// make-model (src/synth/): the architecture name and every tensor the model binds for a given config
// (ARCHITECTURES.md 5.2).
#include <string_view>
#include <vector>

#include "models/qwen35moe.h"
#include "models/tensor_desc.h"

namespace df::models {

inline constexpr std::string_view kQwen35MoeArch = "qwen35moe";

// In llama.cpp's load order: token_embd, output_norm, the head (optional: token_embd when absent), then per
// layer the two norms, the attention layer's Q (query and gate rows per head), K, V, output and QK norms or
// the delta-net layer's projections, conv taps, decay parameters and output norm, then the router, routed
// experts and the gated shared expert. Trailing MTP blocks are not described.
std::vector<TensorDesc> qwen35moe_tensors(const Qwen35MoeConfig& c);

}  // namespace df::models

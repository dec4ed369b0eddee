#pragma once
// lfm2moe's GGUF vocabulary, read by the loader (lfm2moe_config.cpp, lfm2moe_load.cpp) and written by
// make-model (src/synth/): the architecture name, the gating the engine implements, and every tensor the
// model binds for a given config (ARCHITECTURES.md 3.2).
#include <cstdint>
#include <string_view>
#include <vector>

#include "models/lfm2moe.h"
#include "models/tensor_desc.h"

namespace df::models {

inline constexpr std::string_view kLfm2MoeArch = "lfm2moe";
inline constexpr int64_t kLfm2MoeSigmoidGating = 2;  // lfm2moe.expert_gating_func: the only one implemented

// In the golden fixtures' file order: token_embd, the final norm (and the optional untied head), then per
// layer the attention or short-conv block, the FFN norm, and the dense FFN or the router and experts.
std::vector<TensorDesc> lfm2moe_tensors(const Lfm2MoeConfig& c);

}  // namespace df::models

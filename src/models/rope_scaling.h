#pragma once
// RoPE scaling parameters as llama.cpp's context derives them from a model's keys (the op itself is the
// backend's rope with backend::RopeParams).

namespace df::models {

// The attn_factor llama.cpp's context hands to ggml for a YaRN model (llama-context.cpp): mscale(factor) /
// mscale(factor, log_mul) (or mscale(factor) without a log multiplier), divided by ggml's own magnitude
// term so that the net magnitude is mscale, times the GGUF's rope.scaling.attn_factor.
float yarn_attn_factor(float freq_scale, float yarn_log_mul, float rope_attn_factor);

}  // namespace df::models

#include "models/rope_scaling.h"

#include <cmath>

namespace df::models {
namespace {

float mscale(float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f; }

}  // namespace

float yarn_attn_factor(float freq_scale, float yarn_log_mul, float rope_attn_factor) {
  const float factor = 1.0f / freq_scale;
  float a = yarn_log_mul != 0.0f ? mscale(factor, 1.0f) / mscale(factor, yarn_log_mul) : mscale(factor, 1.0f);
  // ggml multiplies its own (1 + 0.1 ln factor) back in; llama.cpp divides it out first.
  a *= 1.0f / (1.0f + 0.1f * std::log(factor));
  return a * rope_attn_factor;
}

}  // namespace df::models

// The YaRN attn_factor llama.cpp's context derives (models/rope_scaling.h): the net magnitude of the rotation
// (this factor times the backend's 1 + 0.1 ln(factor)) is mscale(factor) / mscale(factor, log_mul), times the
// GGUF's rope.scaling.attn_factor.
#include <gtest/gtest.h>

#include <cmath>

#include "models/rope_scaling.h"

namespace df::models {
namespace {

double mscale(double factor, double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; }

TEST(RopeScaling, YarnAttnFactorCancelsTheBackendMagnitudeUpToTheLogMultiplier) {
  for (double factor : {4.0, 32.0})
    for (double log_mul : {0.0, 0.1, 1.0})
      for (double attn : {1.0, 0.5}) {
        const float a = yarn_attn_factor(static_cast<float>(1.0 / factor), static_cast<float>(log_mul),
                                         static_cast<float>(attn));
        const double net = a * (1.0 + 0.1 * std::log(factor));
        const double want =
            (log_mul != 0 ? mscale(factor, 1) / mscale(factor, log_mul) : mscale(factor, 1)) * attn;
        EXPECT_NEAR(net, want, 1e-6 * want) << factor << " " << log_mul << " " << attn;
      }
  EXPECT_FLOAT_EQ(yarn_attn_factor(1.0f, 0.0f, 1.0f), 1.0f);  // no scaling: no magnitude change
}

}  // namespace
}  // namespace df::models

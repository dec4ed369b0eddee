// LFM2's gated short convolution (ARCHITECTURES.md 3.3; ggml_ssm_conv over [state | b⊙x]).
#include <array>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tiling.h"
#include "util/error.h"

namespace df::backend {

void CpuBackend::short_conv(Buf<const float> bcx_buf, int64_t rows, int64_t n, Buf<const float> conv_w_buf,
                            int l_cache, Buf<float> state_buf, Buf<float> y_buf) {
  constexpr int kMaxTaps = 64;
  if (l_cache < 2 || l_cache > kMaxTaps)
    fail("short conv: {} taps is out of range (2..{})", l_cache, kMaxTaps);
  const float* bcx = detail::raw(bcx_buf.first(static_cast<size_t>(rows * 3 * n)));
  const float* conv_w = detail::raw(conv_w_buf.first(static_cast<size_t>(n * l_cache)));
  float* state = detail::raw(state_buf.first(static_cast<size_t>((l_cache - 1) * n)));
  float* y = detail::raw(y_buf.first(static_cast<size_t>(rows * n)));
  const int hist_len = l_cache - 1;
  for (int64_t ch = 0; ch < n; ++ch) {
    std::array<float, kMaxTaps> hist;  // the previous b⊙x values of this channel, oldest first
    for (int j = 0; j < hist_len; ++j) hist[static_cast<size_t>(j)] = state[j * n + ch];
    const float* w = conv_w + ch * l_cache;
    for (int64_t t = 0; t < rows; ++t) {
      const float* row = bcx + t * 3 * n;
      const float z = row[ch] * row[2 * n + ch];
      float sum = 0.0f;
      for (int j = 0; j < hist_len; ++j) sum += w[j] * hist[static_cast<size_t>(j)];
      sum += w[hist_len] * z;
      y[t * n + ch] = row[n + ch] * sum;
      for (int j = 0; j + 1 < hist_len; ++j) hist[static_cast<size_t>(j)] = hist[static_cast<size_t>(j + 1)];
      hist[static_cast<size_t>(hist_len - 1)] = z;
    }
    for (int j = 0; j < hist_len; ++j) state[j * n + ch] = hist[static_cast<size_t>(j)];
  }
}

}  // namespace df::backend

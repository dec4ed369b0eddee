// LFM2's gated short convolution (ARCHITECTURES.md 3.3; ggml_ssm_conv over [state | b⊙x]).
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm_tiling.h"
#include "util/error.h"

namespace df::backend {
namespace {

// A task's share: at least this many channels (whole cache lines of every row it touches) and this many
// multiply-adds, so that a decode step's conv (one token) stays on the calling thread.
constexpr int64_t kMinChannelsPerTask = 64;
constexpr int64_t kMinWorkPerTask = int64_t{1} << 14;

}  // namespace

void CpuBackend::short_conv(Buf<const float> bcx_buf, int64_t rows, int64_t n, Buf<const float> conv_w_buf,
                            int l_cache, Buf<float> state_buf, Buf<float> y_buf) {
  const auto timer = timed({"short_conv", nullptr, 0, 0, rows});
  constexpr int kMaxTaps = 64;
  if (l_cache < 2 || l_cache > kMaxTaps)
    fail("short conv: {} taps is out of range (2..{})", l_cache, kMaxTaps);
  const float* bcx = detail::raw(bcx_buf.first(static_cast<size_t>(rows * 3 * n)));
  const float* conv_w = detail::raw(conv_w_buf.first(static_cast<size_t>(n * l_cache)));
  float* state = detail::raw(state_buf.first(static_cast<size_t>((l_cache - 1) * n)));
  float* y = detail::raw(y_buf.first(static_cast<size_t>(rows * n)));
  const int hist_len = l_cache - 1;
  if (rows <= 0 || n <= 0) return;
  // Channels are independent: a block of channels per task, and within it every loop runs along the channels
  // (contiguous in bcx, state and y), so it vectorises. Each output is the reference's float sequence
  // 0 + w0·h0 + w1·h1 + ... + w_last·z, then c times that; tap j of token t is the (t + j)-th value of
  // [state rows | z of the batch's tokens], z = b ⊙ x (recomputed where read: the same product each time).
  const int64_t per_channel = rows * l_cache;
  const int64_t grain =
      detail::round_up(std::max<int64_t>(kMinChannelsPerTask, kMinWorkPerTask / per_channel), 16);
  pool_.parallel_for(n, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < rows; ++t) {
      const float* row = bcx + t * 3 * n;
      float* yt = y + t * n;
      for (int64_t ch = c0; ch < c1; ++ch) yt[ch] = 0.0f;
      for (int j = 0; j < hist_len; ++j) {
        const int64_t s = t + j;  // index into [state rows | z rows]
        if (s < hist_len) {
          const float* h = state + s * n;
          for (int64_t ch = c0; ch < c1; ++ch) yt[ch] += conv_w[ch * l_cache + j] * h[ch];
        } else {
          const float* src = bcx + (s - hist_len) * 3 * n;
          for (int64_t ch = c0; ch < c1; ++ch)
            yt[ch] += conv_w[ch * l_cache + j] * (src[ch] * src[2 * n + ch]);
        }
      }
      for (int64_t ch = c0; ch < c1; ++ch) {
        const float z = row[ch] * row[2 * n + ch];
        yt[ch] = row[n + ch] * (yt[ch] + conv_w[ch * l_cache + hist_len] * z);
      }
    }
    // The new state: the last hist_len values of [state rows | z rows]. Row i takes value rows + i, always a
    // later one, so copying upwards never reads a row already overwritten.
    for (int i = 0; i < hist_len; ++i) {
      const int64_t s = rows + i;
      float* dst = state + i * n;
      if (s < hist_len) {
        const float* h = state + s * n;
        for (int64_t ch = c0; ch < c1; ++ch) dst[ch] = h[ch];
      } else {
        const float* src = bcx + (s - hist_len) * 3 * n;
        for (int64_t ch = c0; ch < c1; ++ch) dst[ch] = src[ch] * src[2 * n + ch];
      }
    }
  });
}

}  // namespace df::backend

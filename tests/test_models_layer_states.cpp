// The per-layer sequence state (models/sequence_state.h): each layer sized from its own spec (KV with its own
// head count and size, short conv, delta-net), the views the backend gets, reset, and the snapshot copy.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "error_matchers.h"
#include "models/sequence_state.h"

namespace df::models {
namespace {

using Kind = LayerStateSpec::Kind;

// The states live in the backend's memory: the test reads and writes them through its transfer calls.
template <class T>
std::vector<T> read(backend::Backend& be, backend::Buf<T> b) {
  std::vector<T> out(b.size());
  be.download(out.data(), backend::Buf<const T>(b), out.size());
  return out;
}
template <class T>
void fill(backend::Backend& be, backend::Buf<T> b, T first, T step) {
  std::vector<T> v(b.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(first + static_cast<T>(i) * step);
  be.upload(b, v.data(), v.size());
}

// Gemma-like sliding and global layers of different head sizes, a conv layer, a delta-net layer, a plain one.
std::vector<LayerStateSpec> mixed() {
  return {LayerStateSpec::kv(2, 64, 16), LayerStateSpec::kv(1, 128), LayerStateSpec::conv(3, 8),
          LayerStateSpec::delta_net(4, 6, 2, 3, 5), LayerStateSpec{}};
}

TEST(LayerStates, EachLayerIsSizedAndViewedFromItsOwnSpec) {
  const int n_ctx = 10;
  backend::CpuBackend be(1);
  LayerStates s(be, mixed(), n_ctx);
  EXPECT_EQ(mixed()[0].bytes(n_ctx), 2u * 10 * 2 * 64 * 2);
  EXPECT_EQ(mixed()[1].bytes(n_ctx), 2u * 10 * 1 * 128 * 2);
  EXPECT_EQ(mixed()[2].bytes(n_ctx), 2u * 8 * 4);                // (taps - 1) rows of 8 floats
  EXPECT_EQ(mixed()[3].bytes(n_ctx), (3u * 6 + 2 * 3 * 5) * 4);  // conv rows + heads x key x value
  EXPECT_EQ(mixed()[4].bytes(n_ctx), 0u);
  EXPECT_EQ(s.bytes(), LayerStates::bytes_for(mixed(), n_ctx));
  const auto a = s.kv(0), b = s.kv(1);
  EXPECT_EQ(a.n_head_kv, 2);
  EXPECT_EQ(a.head_dim, 64);
  EXPECT_EQ(b.n_head_kv, 1);
  EXPECT_EQ(b.head_dim, 128);
  EXPECT_EQ(a.n_ctx, n_ctx);
  EXPECT_EQ(a.k.size(), 10u * 2 * 64);
  EXPECT_EQ(b.v.size(), 10u * 128);
  EXPECT_EQ(s.conv(2).size(), 16u);
  EXPECT_EQ(s.conv(3).size(), 18u);
  EXPECT_EQ(s.matrix(3).size(), 30u);
  df::testing::expect_error([&] { s.kv(2); }, {"layer 2 holds a short-conv state, not a KV cache"});
  df::testing::expect_error([&] { s.conv(0); }, {"layer 0 holds a KV cache, not a conv state"});
  df::testing::expect_error([&] { s.matrix(4); }, {"layer 4 holds no sequence state, not a delta-net state"});
  df::testing::expect_error([&] { s.kv(5); }, {"layer 5 out of range (5 layers)"});
}

TEST(LayerStates, ResetClearsTheRecurrentStatesAndCopyTakesTheKvPrefixAndEveryRecurrentState) {
  const int n_ctx = 10;
  backend::CpuBackend be(1);
  LayerStates a(be, mixed(), n_ctx), b(be, mixed(), n_ctx);
  const size_t row0 = 2 * 64, row1 = 128;
  fill<uint16_t>(be, a.kv(0).k, 1, 1);
  fill<uint16_t>(be, a.kv(0).v, 1, 1);
  fill<uint16_t>(be, a.kv(1).k, 7, 1);
  fill<uint16_t>(be, a.kv(1).v, 7, 1);
  fill<float>(be, a.conv(2), 0.5f, 1.0f);
  fill<float>(be, a.matrix(3), 0.0f, -1.0f);
  b.copy_from(a, 4);
  const auto ak0 = read(be, a.kv(0).k), av0 = read(be, a.kv(0).v), bk0 = read(be, b.kv(0).k),
             bv0 = read(be, b.kv(0).v), ak1 = read(be, a.kv(1).k), bk1 = read(be, b.kv(1).k);
  for (size_t i = 0; i < n_ctx * row0; ++i) {
    EXPECT_EQ(bk0[i], i < 4 * row0 ? ak0[i] : 0) << i;  // positions 0..3 only
    // V is transposed (a row of n_ctx positions per head dim): positions 0..3 of every row
    EXPECT_EQ(bv0[i], i % n_ctx < 4 ? av0[i] : 0) << i;
  }
  for (size_t i = 0; i < n_ctx * row1; ++i) EXPECT_EQ(bk1[i], i < 4 * row1 ? ak1[i] : 0) << i;
  EXPECT_EQ(read(be, b.conv(2)), read(be, a.conv(2)));
  EXPECT_EQ(read(be, b.matrix(3)), read(be, a.matrix(3)));
  EXPECT_EQ(read(be, a.conv(2))[3], 3.5f);
  a.reset();
  for (float v : read(be, a.conv(2))) EXPECT_EQ(v, 0.0f);
  for (float v : read(be, a.matrix(3))) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(read(be, a.kv(0).k)[5], 6);  // the KV is not cleared: attention reads only positions below n_past

  LayerStates longer(be, mixed(), 20), other(be, {LayerStateSpec::kv(2, 64, 16)}, n_ctx);
  df::testing::expect_error([&] { b.copy_from(longer, 1); }, {"context 20", "context 10"});
  df::testing::expect_error([&] { b.copy_from(other, 1); }, {"(1 layers) into one of context 10 (5 layers)"});
}

}  // namespace
}  // namespace df::models

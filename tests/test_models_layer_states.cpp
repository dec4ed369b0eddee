// The per-layer sequence state (models/sequence_state.h): each layer sized from its own spec (KV with its own
// head count and size, short conv, delta-net), the views the backend gets, reset, and the snapshot copy.
#include <gtest/gtest.h>

#include <cstring>

#include "error_matchers.h"
#include "models/sequence_state.h"

namespace df::models {
namespace {

using Kind = LayerStateSpec::Kind;

// Gemma-like sliding and global layers of different head sizes, a conv layer, a delta-net layer, a plain one.
std::vector<LayerStateSpec> mixed() {
  return {LayerStateSpec::kv(2, 64, 16), LayerStateSpec::kv(1, 128), LayerStateSpec::conv(3, 8),
          LayerStateSpec::delta_net(4, 6, 2, 3, 5), LayerStateSpec{}};
}

TEST(LayerStates, EachLayerIsSizedAndViewedFromItsOwnSpec) {
  const int n_ctx = 10;
  LayerStates s(mixed(), n_ctx);
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
  EXPECT_NE(a.k, b.k);
  EXPECT_NE(s.conv(2), nullptr);
  EXPECT_NE(s.conv(3), s.matrix(3));
  df::testing::expect_error([&] { s.kv(2); }, {"layer 2 holds a short-conv state, not a KV cache"});
  df::testing::expect_error([&] { s.conv(0); }, {"layer 0 holds a KV cache, not a conv state"});
  df::testing::expect_error([&] { s.matrix(4); }, {"layer 4 holds no sequence state, not a delta-net state"});
  df::testing::expect_error([&] { s.kv(5); }, {"layer 5 out of range (5 layers)"});
}

TEST(LayerStates, ResetClearsTheRecurrentStatesAndCopyTakesTheKvPrefixAndEveryRecurrentState) {
  const int n_ctx = 10;
  LayerStates a(mixed(), n_ctx), b(mixed(), n_ctx);
  const size_t row0 = 2 * 64, row1 = 128;
  for (size_t i = 0; i < n_ctx * row0; ++i) a.kv(0).k[i] = a.kv(0).v[i] = static_cast<uint16_t>(i + 1);
  for (size_t i = 0; i < n_ctx * row1; ++i) a.kv(1).k[i] = a.kv(1).v[i] = static_cast<uint16_t>(i + 7);
  for (int i = 0; i < 16; ++i) a.conv(2)[i] = static_cast<float>(i) + 0.5f;
  for (int i = 0; i < 30; ++i) a.matrix(3)[i] = -static_cast<float>(i);
  b.copy_from(a, 4);
  for (size_t i = 0; i < n_ctx * row0; ++i) {
    EXPECT_EQ(b.kv(0).k[i], i < 4 * row0 ? a.kv(0).k[i] : 0) << i;  // positions 0..3 only
    EXPECT_EQ(b.kv(0).v[i], i < 4 * row0 ? a.kv(0).v[i] : 0) << i;
  }
  for (size_t i = 0; i < n_ctx * row1; ++i) EXPECT_EQ(b.kv(1).k[i], i < 4 * row1 ? a.kv(1).k[i] : 0) << i;
  EXPECT_EQ(std::memcmp(b.conv(2), a.conv(2), 16 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(b.matrix(3), a.matrix(3), 30 * sizeof(float)), 0);
  a.reset();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(a.conv(2)[i], 0.0f);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(a.matrix(3)[i], 0.0f);
  EXPECT_EQ(a.kv(0).k[5], 6);  // the KV is not cleared: attention reads only positions below n_past

  LayerStates longer(mixed(), 20), other({LayerStateSpec::kv(2, 64, 16)}, n_ctx);
  df::testing::expect_error([&] { b.copy_from(longer, 1); }, {"context 20", "context 10"});
  df::testing::expect_error([&] { b.copy_from(other, 1); }, {"(1 layers) into one of context 10 (5 layers)"});
}

}  // namespace
}  // namespace df::models

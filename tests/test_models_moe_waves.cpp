// run_experts (moe_block.cpp) hands a batch's experts to the backend in waves whose size is the provider's
// ExpertProvider::max_held: top-k when the provider gives none (it must find room for each acquire), at most
// max_held otherwise (a device tier holding a prefill chunk's union pinned: one grouped FFN a layer). The
// wave size never changes a bit of the experts' outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend_factory.h"
#include "models/moe_block.h"
#include "util/error.h"

namespace df::models {
namespace {

constexpr int64_t kEmbd = 32, kFf = 64;
constexpr int kExperts = 8, kTopK = 2;

// Every expert's F32 matrices in host memory (the CPU backend reads them there); counts what is held.
class CountingProvider final : public ExpertProvider {
 public:
  explicit CountingProvider(size_t max_held) : max_held_(max_held) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    weights_.resize(kExperts);
    for (auto& w : weights_) {
      w.resize(static_cast<size_t>(3 * kEmbd * kFf));
      for (float& v : w) v = u(rng);
    }
  }
  void prefetch(int, std::span<const int32_t>) override {}
  size_t max_held(int) const override { return max_held_; }
  ExpertView acquire(int, int expert) override {
    const float* w = weights_[static_cast<size_t>(expert)].data();
    peak_held = std::max(peak_held, ++held);
    ++acquires;
    ExpertView v;
    v.gate = w;
    v.up = w + kEmbd * kFf;
    v.down = w + 2 * kEmbd * kFf;
    return v;
  }
  void release(int, int) override {
    if (held == 0) fail("release without an acquire");
    --held;
  }

  size_t held = 0, peak_held = 0, acquires = 0;

 private:
  size_t max_held_;
  std::vector<std::vector<float>> weights_;
};

struct WaveRun {
  std::vector<float> out;
  size_t peak_held, acquires;
};

// Tokens routed so that every expert is used (token t: experts t % E and (t + 3) % E).
WaveRun run_layer(size_t max_held, int64_t T) {
  auto be = backend::make_backend(backend::BackendOptions{"cpu", 1});
  CountingProvider provider(max_held);
  MoeBuffers b;
  b.reserve(*be, static_cast<size_t>(T), kEmbd, kExperts, kTopK);
  for (int64_t t = 0; t < T; ++t) {
    b.expert_ids_host[static_cast<size_t>(t * kTopK)] = static_cast<int32_t>(t % kExperts);
    b.expert_ids_host[static_cast<size_t>(t * kTopK + 1)] = static_cast<int32_t>((t + 3) % kExperts);
  }
  const size_t n_used = group_by_expert(b, T, kTopK, kExperts);
  EXPECT_EQ(n_used, static_cast<size_t>(kExperts));
  upload_groups(*be, b, T, kTopK);
  std::vector<float> x(static_cast<size_t>(T * kEmbd));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : x) v = u(rng);
  backend::DeviceBuffer xn = be->alloc_array<float>(x.size(), "test input");
  be->upload(xn.as<float>(), x.data(), x.size());
  ExpertWave wave;
  wave.reserve(kTopK, kExperts);
  run_experts(*be, provider, 0, b, n_used, wave, backend::ActivationParams{}, ExpertBiases{},
              backend::Buf<const float>(xn.as<float>()), T, kEmbd, kFf);
  WaveRun r;
  r.out.resize(static_cast<size_t>(T * kTopK * kEmbd));
  be->download(r.out.data(), backend::Buf<const float>(b.expert_out.view()), r.out.size());
  r.peak_held = provider.peak_held;
  r.acquires = provider.acquires;
  EXPECT_EQ(provider.held, 0u) << "every acquired expert is released";
  return r;
}

TEST(MoeWaves, WithoutMaxHeldTheWavesAreTopKExperts) {
  const WaveRun r = run_layer(0, 16);
  EXPECT_EQ(r.peak_held, static_cast<size_t>(kTopK));
  EXPECT_EQ(r.acquires, static_cast<size_t>(kExperts));
}

TEST(MoeWaves, AProviderThatHoldsEveryChosenExpertGetsTheLayerInOneWave) {
  const WaveRun r = run_layer(64, 16);
  EXPECT_EQ(r.peak_held, static_cast<size_t>(kExperts));
  EXPECT_EQ(r.acquires, static_cast<size_t>(kExperts));
}

TEST(MoeWaves, WavesAreAtMostMaxHeldWhenThatIsBetweenTopKAndTheUnion) {
  const WaveRun r = run_layer(5, 16);
  EXPECT_EQ(r.peak_held, 5u);
  EXPECT_EQ(r.acquires, static_cast<size_t>(kExperts));
}

TEST(MoeWaves, TheWaveSizeChangesNoBitOfTheExpertsOutputs) {
  const WaveRun by_k = run_layer(0, 16), by_five = run_layer(5, 16), whole = run_layer(64, 16);
  ASSERT_EQ(by_k.out.size(), whole.out.size());
  EXPECT_EQ(std::memcmp(by_k.out.data(), whole.out.data(), whole.out.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(by_five.out.data(), whole.out.data(), whole.out.size() * sizeof(float)), 0);
  EXPECT_NE(std::count(whole.out.begin(), whole.out.end(), 0.0f),
            static_cast<std::ptrdiff_t>(whole.out.size()))
      << "the experts produced something";
}

}  // namespace
}  // namespace df::models

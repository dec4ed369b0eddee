#pragma once
// Deterministic random numbers for synthetic models. Only integer arithmetic and exact float operations, no
// libm and no <random> distributions (whose output is implementation-defined), so a seed gives the same bytes
// with any compiler, library and thread count.
#include <cstdint>
#include <string_view>

namespace df::synth {

// splitmix64 (Steele, Lea, Flood 2014): a full-period 64-bit generator whose output function is a good mixer.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }
  // Uniform in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  // Uniform in [0, 1) with 24 bits.
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  // Approximately standard normal: the Irwin-Hall sum of four 16-bit uniforms, centred and scaled to unit
  // variance (support +-3.46). Weights only need a symmetric bell of the right variance, and this needs no
  // libm.
  float normal() {
    const uint64_t r = next();
    const uint32_t sum = static_cast<uint32_t>(r & 0xffff) + static_cast<uint32_t>((r >> 16) & 0xffff) +
                         static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
    // Each 16-bit part has mean 65535 / 2 and variance ~65536^2 / 12: centre on the exact mean of the sum.
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 65536
    return (static_cast<float>(static_cast<int32_t>(sum) - 2 * 65535)) * kScale;
  }

 private:
  uint64_t state_;
};

// FNV-1a over the bytes of a name: a stable 64-bit key, so every tensor draws from its own stream whatever
// the order in which tensors are generated.
inline uint64_t name_hash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ULL;
  return h;
}

// The seed of row `row` of the tensor `name` in a model generated from `seed`.
inline uint64_t row_seed(uint64_t seed, std::string_view name, uint64_t row) {
  return mix64(mix64(seed ^ name_hash(name)) + row * 0xd1b54a32d192ed03ULL);
}

}  // namespace df::synth

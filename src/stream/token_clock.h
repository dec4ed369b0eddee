#pragma once
// Time in tokens, as a policy that sees only demand accesses can tell it: every token acquires top_k experts
// of each MoE layer, so a layer's accesses / top_k is the number of tokens that passed it (a prefill chunk
// asks each expert once, so a chunk counts as fewer tokens: it is one pass). A clock per layer, since a cache
// shared by all layers sees them in turn.
#include <cstdint>
#include <vector>

namespace df::stream {

struct ClockShape {
  int n_expert = 1;  // keys per MoE layer
  int top_k = 1;
};

class TokenClock {
 public:
  TokenClock(ClockShape shape, int n_keys)
      : shape_(shape), accesses_(static_cast<size_t>((n_keys + shape.n_expert - 1) / shape.n_expert), 0) {}
  void tick(int key) { ++accesses_[layer(key)]; }
  double tokens(int key) const {
    return static_cast<double>(accesses_[layer(key)]) / static_cast<double>(shape_.top_k);
  }
  uint64_t accesses(int key) const { return accesses_[layer(key)]; }
  int top_k() const { return shape_.top_k; }
  uint64_t memory_bytes() const { return accesses_.capacity() * sizeof(uint64_t); }

 private:
  size_t layer(int key) const { return static_cast<size_t>(key / shape_.n_expert); }
  ClockShape shape_;
  std::vector<uint64_t> accesses_;
};

}  // namespace df::stream

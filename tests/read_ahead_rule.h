#pragma once
// The read-ahead rule every MoE model follows, for the tests that count its guesses: MoE layer l guesses MoE
// layers l+1..l+lookahead (the seed's rule), and a dense layer just before MoE layer i guesses MoE layers
// i..i+lookahead-1 (so that the first MoE layer after dense layers is read ahead too).
#include <algorithm>
#include <cstddef>
#include <vector>

namespace df::testing {

// The guess rounds one forward pass makes for MoE layer j of a model whose MoE layers are the model layers
// moe_layers (ascending).
inline int guess_rounds_per_forward(const std::vector<int>& moe_layers, int j, int lookahead) {
  const auto after_dense = [&](int i) {
    const int layer = moe_layers[static_cast<size_t>(i)];
    return layer > 0 && (i == 0 || moe_layers[static_cast<size_t>(i - 1)] != layer - 1);
  };
  int rounds = std::min(j, lookahead);
  for (int i = std::max(0, j - lookahead + 1); i <= j; ++i) rounds += after_dense(i) ? 1 : 0;
  return rounds;
}

}  // namespace df::testing

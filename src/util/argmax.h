#pragma once
// Greedy decoding's choice, shared by the sampler (the host) and the CPU backend's argmax op (the greedy
// step queued ahead of the host), so that both give the same id for the same logits.
#include <cstdint>
#include <span>

namespace df {

// The first index of the greatest value (NaNs never chosen, unless the first value is one: then 0; +0 and
// -0 equal); 0 for an empty span.
int32_t first_argmax(std::span<const float> values);

}  // namespace df

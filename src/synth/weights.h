#pragma once
// The tensors of a synthetic model and the distribution of each, chosen so that a random model behaves: every
// block reads an RMS-normed input (RMS ~1) and its projections are scaled so that each block adds about
// `block_gain` RMS to the residual stream, which therefore grows like sqrt(embd_std^2 + blocks *
// block_gain^2) instead of exploding or vanishing; the head is scaled so that the logits have a std of about
// `logit_std`.
//
// Routing subspace (route_dims R > 0): every block's output projection (attention out, conv out_proj, dense
// ffn_down, expert down) has zero rows for the last R hidden dims, so those dims of the residual stream hold
// the token embedding and nothing else, exactly, at every layer; every router reads only those dims. Expert
// choices then depend on the token and the layer (and, through the RMS norm, on one scale factor) and not on
// the rounding of everything computed before, so two correct engines pick the same experts.
#include <cstdint>
#include <span>
#include <vector>

#include "gguf/gguf.h"
#include "synth/config.h"

namespace df::synth {

struct TensorRecipe {
  gguf::TensorSpec spec;
  float mean = 0;  // every stored value is mean + std * N(0, 1) ...
  float std = 0;
  int64_t zero_rows_from = -1;  // ... except rows (ne1 index within each ne2 slab) >= this, which are 0
  int64_t cols_from = 0;        // ... and columns (ne0 index) < this, which are 0
  std::vector<float> values;    // when not empty: the tensor's values as they are (one row, e.g. rope_freqs)

  int64_t rows() const;      // ne1 * ne2 * ne3
  int64_t row_len() const;   // ne0
  size_t row_bytes() const;  // stored bytes of one row
};

// In the order of the architecture's description (models/<arch>_tensors.h): the golden fixtures' file order.
std::vector<TensorRecipe> plan_tensors(const Config& c);

// Residual-stream RMS expected after `blocks` blocks (mixer or FFN), from the design above.
float expected_residual_rms(const Numerics& n, int blocks);

// Generates rows [row_begin, row_end) of tensor `r` into `out` (exactly (row_end - row_begin) * row_bytes()
// bytes), stored in r.spec.type. Each row draws from its own stream (seed, tensor name, row index), so any
// split of the rows over threads gives the same bytes.
void generate_rows(const TensorRecipe& r, uint64_t seed, int64_t row_begin, int64_t row_end,
                   std::span<uint8_t> out);

// The whole tensor, with `threads` workers (0: hardware concurrency, at most 16).
void generate_tensor(const TensorRecipe& r, uint64_t seed, std::span<uint8_t> out, int threads);

}  // namespace df::synth

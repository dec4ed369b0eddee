#pragma once
// The per-sequence state of the MoE architectures: the KV cache, the batch buffers of the trunk and of the
// MoE blocks, and the ModelState they make up. A model derives its State from MoeSequenceState and adds
// what only it has (lfm2moe's conv state, gpt-oss's gathered expert rows).
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "models/model.h"
#include "models/moe_block.h"

namespace df::models {

// f16 K and V of every position for each attention layer (empty for the other layers).
class KvCache {
 public:
  // attn[il]: layer il has attention; an empty attn means every layer does.
  KvCache(const std::vector<bool>& attn, int n_layer, int n_ctx, int n_head_kv, int head_dim);

  backend::KvCacheView view(int il);
  size_t bytes() const;
  // The K and V of the first n_pos positions of every layer, from a cache of the same shape.
  void copy_prefix(const KvCache& other, int n_pos);
  // What bytes() is for n_kv_layers attention layers, without allocating.
  static uint64_t bytes_for(int n_kv_layers, int n_ctx, int n_head_kv, int head_dim);

 private:
  std::vector<std::vector<uint16_t>> k_, v_;
  int n_ctx_, n_head_kv_, head_dim_;
};

// The residual stream and attention buffers of a batch. reserve() only grows them.
struct TrunkBuffers {
  std::vector<int32_t> pos;
  std::vector<float> x, xn, mix, q, k, v, att;
  std::vector<uint8_t> scratch;  // activation quantization, act_row_bytes per token
  std::vector<float> attn_scratch;

  void reserve(size_t tokens, size_t n_embd, size_t q_dim, size_t kv_dim, size_t act_row_bytes);
  size_t bytes() const;  // what ModelState::bytes() counts of these buffers
  // What bytes() is after reserve(tokens, ...), without allocating.
  static size_t bytes_for(size_t tokens, size_t n_embd, size_t q_dim, size_t kv_dim, size_t act_row_bytes);
};

// The sizes the batch buffers grow with.
struct BatchDims {
  size_t n_embd = 0, q_dim = 0, kv_dim = 0, n_expert = 0, k = 0;
  size_t act_row_bytes = 0;  // activation scratch per token
};

class MoeSequenceState : public ModelState {
 public:
  MoeSequenceState(int n_ctx, KvCache kv_cache) : kv(std::move(kv_cache)), n_ctx_(n_ctx) {}

  int n_ctx() const override { return n_ctx_; }
  // The KV cache needs no clearing: attention reads only positions below n_past + T.
  void reset() override { n_past = 0; }
  size_t bytes() const override { return kv.bytes() + trunk.bytes() + moe.bytes(); }

  // True when the buffers hold fewer than T tokens; grow_batch() then grows the shared ones, and the model
  // its own, before batch_grown(T).
  bool batch_too_small(int64_t T) const { return T > rows_; }
  void grow_batch(int64_t T, const BatchDims& d);
  void batch_grown(int64_t T) { rows_ = T; }

  KvCache kv;
  TrunkBuffers trunk;
  MoeBuffers moe;

 protected:
  // The part of copy_sequence_from() every MoE state shares: n_past and the KV below it. `arch` names the
  // model in the message when the shapes differ.
  void copy_kv_from(const MoeSequenceState& other, const char* arch);

 private:
  int n_ctx_;
  int64_t rows_ = 0;
};

}  // namespace df::models

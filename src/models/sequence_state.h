#pragma once
// The per-sequence state of the MoE architectures: the KV cache, the batch buffers of the trunk and of the
// MoE blocks, and the ModelState they make up. A model derives its State from MoeSequenceState and adds
// what only it has (lfm2moe's short-conv batch buffers). Every buffer an op touches is the backend's
// (backend/buffer.h); only what the host itself computes (positions, the grouping of a batch by expert)
// is host memory.
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "models/model.h"
#include "models/moe_block.h"

namespace df::models {

// What one layer carries from token to token, sized from the model's config: nothing (a layer without a
// sequence mixer), a KV cache with the layer's own head count, head size and window, a short-conv state, or a
// gated delta-net state (a conv state and one key × value matrix per head).
struct LayerStateSpec {
  enum class Kind { kNone, kKv, kConv, kDeltaNet };
  Kind kind = Kind::kNone;
  int n_head_kv = 0, head_dim = 0;  // kKv
  int window = 0;             // kKv: the layer's sliding window (0: all); the cache holds every position
  int conv_taps = 0;          // kConv, kDeltaNet: kernel width; the state keeps conv_taps - 1 rows
  int64_t conv_channels = 0;  // kConv, kDeltaNet
  int dn_heads = 0, dn_key_dim = 0, dn_value_dim = 0;  // kDeltaNet: the recurrent matrices

  static LayerStateSpec kv(int n_head_kv, int head_dim, int window = 0);
  static LayerStateSpec conv(int taps, int64_t channels);
  static LayerStateSpec delta_net(int taps, int64_t channels, int heads, int key_dim, int value_dim);
  // What one layer of this spec holds for n_ctx positions (the state is allocated at that size).
  uint64_t bytes(int n_ctx) const;
};

// The per-layer sequence state of one sequence, in the backend's memory: the f16 K and V of every position
// of each KV layer (laid out as backend::KvCacheView says), the conv rows of each conv layer, the delta-net
// matrices. Allocated once for n_ctx positions; nothing grows afterwards.
class LayerStates {
 public:
  LayerStates(backend::Backend& be, std::vector<LayerStateSpec> specs, int n_ctx);

  const LayerStateSpec& spec(int il) const { return specs_[static_cast<size_t>(il)]; }
  int n_layer() const { return static_cast<int>(specs_.size()); }
  // df::Error (naming the layer and what it holds) when layer il holds no state of that kind.
  backend::KvCacheView kv(int il);
  backend::Buf<float> conv(int il);    // (taps - 1) × channels, oldest row first
  backend::Buf<float> matrix(int il);  // delta-net: heads × key_dim × value_dim
  size_t bytes() const;
  // Clears what must start from zero (conv rows, matrices); the KV needs no clearing (attention reads only
  // positions below n_past).
  void reset();
  // The first n_pos positions of every KV layer and all of every recurrent state, from states of the same
  // specs and context (df::Error otherwise).
  void copy_from(const LayerStates& other, int n_pos);
  static uint64_t bytes_for(const std::vector<LayerStateSpec>& specs, int n_ctx);

 private:
  struct Layer {
    backend::DeviceBuffer k, v, conv, matrix;
  };
  const LayerStateSpec& checked(int il, LayerStateSpec::Kind a, LayerStateSpec::Kind b,
                                const char* what) const;
  void copy_v_prefix(backend::DeviceBuffer& dst, const backend::DeviceBuffer& src, const LayerStateSpec& s,
                     int n_pos);
  backend::Backend* be_;
  std::vector<LayerStateSpec> specs_;
  std::vector<Layer> layers_;
  int n_ctx_;
};

// The residual stream and attention buffers of a batch. reserve() only grows them.
struct TrunkBuffers {
  std::vector<int32_t> pos_host,
      tokens_host;                   // the batch's positions and token ids, every sequence's in turn
  DeviceArray<int32_t> pos, tokens;  // the same, uploaded for rope and get_rows
  DeviceArray<float> x, xn, mix, q, k, v, att;
  DeviceArray<uint8_t> scratch;  // activation quantization, act_row_bytes per token
  DeviceArray<float> attn_scratch;
  DeviceArray<float> logits;  // the head's output, read back (sized per call: one row or every row)

  void reserve(backend::Backend& be, size_t tokens, size_t n_embd, size_t q_dim, size_t kv_dim,
               size_t act_row_bytes);
  size_t bytes() const;  // what ModelState::bytes() counts of these buffers
  // What bytes() is after reserve(tokens, ...), without allocating.
  static size_t bytes_for(size_t tokens, size_t n_embd, size_t q_dim, size_t kv_dim, size_t act_row_bytes);
};

// The sizes the batch buffers grow with.
struct BatchDims {
  size_t n_embd = 0, q_dim = 0, kv_dim = 0, n_expert = 0, k = 0;
  size_t act_row_bytes = 0;  // activation scratch per token
};

class MoeSequenceState;
class MoeModelBase;

// One sequence's rows in a batch (Model::forward_many; forward() is a batch of one).
struct BatchSegment {
  MoeSequenceState* state = nullptr;
  std::span<const int32_t> tokens;
  std::span<float> logits;
  int64_t row0 = 0, rows = 0;  // its rows of the batch
  int64_t logit_rows = 0;      // its rows that get logits: the last, or every one
  int n_past = 0;              // the state's n_past as the batch starts: row r is at position n_past + r
};

// The sequences of one forward, their rows in order. They are computed together in the batch buffers of
// `work` (the first sequence's state); only the sequence mixers (attention, short conv) and the positions
// are per segment.
struct SequenceBatch {
  std::vector<BatchSegment> segments;  // kept by the model and refilled: no allocation per step
  int64_t T = 0, logit_rows = 0;
  MoeSequenceState* work = nullptr;
  // Greedy decoding queued ahead (Model::queue_greedy; one sequence, one token): >= 0, the logits' argmax
  // is left in the work state's token ids for the next such forward and read back into this read-back slot
  // instead of the logits.
  int greedy_slot = -1;
  bool token_on_device = false;  // the token is the work state's token id as the last greedy forward left it
};

class MoeSequenceState : public ModelState {
 public:
  // owner: the model that made the state (own_state() and copy_sequence_from() check it); the layers it
  // does not run (a stage of a layer split) hold no state. attn_head_dim: the head size attention scratch is
  // sized for (0: no attention layer).
  MoeSequenceState(const MoeModelBase& owner, backend::Backend& be, int n_ctx,
                   std::vector<LayerStateSpec> specs, int attn_head_dim);

  int n_ctx() const override { return n_ctx_; }
  void reset() override {
    n_past = 0;
    layers.reset();
  }
  size_t bytes() const override { return layers.bytes() + trunk.bytes() + moe.bytes(); }
  // n_past, the KV below it and the recurrent states of another state of the same model and context
  // (df::Error otherwise).
  void copy_sequence_from(const ModelState& other) final;
  const Model* owner() const { return owner_; }

  // True when the buffers hold fewer than T tokens; grow_batch() then grows the shared ones, and the model
  // its own, before batch_grown(T).
  bool batch_too_small(int64_t T) const { return T > rows_; }
  void grow_batch(int64_t T, const BatchDims& d);
  void batch_grown(int64_t T) { rows_ = T; }

  backend::Backend& be;  // the model's backend: every buffer here is its memory
  LayerStates layers;
  TrunkBuffers trunk;
  MoeBuffers moe;

 private:
  const Model* owner_;
  int n_ctx_;
  int64_t rows_ = 0;
};

}  // namespace df::models

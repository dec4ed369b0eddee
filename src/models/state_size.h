#pragma once
// What one sequence's state holds (KV cache, recurrent state, batch buffers, attention scratch), computed
// from the model's sizes alone, so that a caller can refuse a context that memory cannot hold, or size the
// expert cache beside it, before anything is allocated. ModelState::bytes() of a real state is the same
// number (tests/test_models_state_size.cpp holds them equal).
#include <cstddef>
#include <cstdint>

namespace df::gguf {
class File;
}

namespace df::models {

struct Lfm2MoeConfig;
struct Qwen3MoeConfig;
struct GptOssConfig;
struct HyV3Config;
struct Gemma4Config;
struct Qwen35MoeConfig;

struct StateDims {
  int n_layer = 0;
  int n_kv_layers = 0;  // layers with a KV cache of n_head_kv x head_dim
  // KV cache bytes per position of layers whose sizes differ from those (gemma4's sliding and global layers)
  uint64_t other_kv_bytes_per_position = 0;
  int n_head_kv = 0, head_dim = 0;
  size_t n_embd = 0, q_dim = 0, kv_dim = 0, n_expert = 0, k = 0;
  size_t act_row_bytes = 0;          // activation scratch per token (the widest quantized matmul input)
  size_t extra_bytes_per_token = 0;  // the architecture's own batch buffers
  size_t fixed_bytes = 0;            // recurrent state (lfm2moe's short-conv taps) and per-wave tables
};

// Bytes of a state for n_ctx positions once it has run batches of up to n_batch tokens, with n_threads
// threads of the default (CPU) backend, whose attention scratch is per thread.
uint64_t state_bytes(const StateDims& dims, int n_ctx, int n_batch, int n_threads);

// The model layers [first, end) whose state a model holds: all of them (end -1: to the last), or a stage's
// of a layer split, whose state holds only its own layers' KV and recurrent state.
struct LayerRange {
  int first = 0, end = -1;
  bool holds(int layer, int n_layer) const { return layer >= first && layer < (end < 0 ? n_layer : end); }
};

// The dims of each architecture from its config, for the layers of `range`; act_row_bytes is left 0 (the
// loader knows it exactly).
StateDims state_dims_of(const Lfm2MoeConfig& c, LayerRange range = {});
StateDims state_dims_of(const Qwen3MoeConfig& c, LayerRange range = {});
StateDims state_dims_of(const GptOssConfig& c, LayerRange range = {});
StateDims state_dims_of(const HyV3Config& c, LayerRange range = {});
StateDims state_dims_of(const Gemma4Config& c, LayerRange range = {});
StateDims state_dims_of(const Qwen35MoeConfig& c, LayerRange range = {});

// The dims from a GGUF's keys and tensor types, no weight read: what a model loaded from it would report,
// with the activation scratch taken from the widest matrix of the file (at least what the model uses).
// Throws df::Error for an unsupported architecture or invalid keys, as load_model does.
StateDims state_dims(const gguf::File& file);

}  // namespace df::models

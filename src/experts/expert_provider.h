#pragma once
// The only way a model reaches its routed experts, and the only thing the streaming cache (stream/) and the
// model code (models/) share about them: neither depends on the other. A provider hands out read-only views
// of one expert's gate/up/down rows between acquire() and release(); prefetch() is a hint with guessed ids
// for a later layer; will_acquire() announces a layer's experts so that a disk-backed provider can issue
// every read before the first acquire waits. Whatever the provider does, the expert bytes are the GGUF's, so
// the model's output never depends on it.
//
// A view holds host pointers in the layout the backend asked for (Backend::preferred_packing); acquire()
// returns once the bytes are there. (A device backend will want a view of a device buffer with a readiness it
// can wait on, behind the same acquire/release: not done yet.)
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/ggml_types.h"
#include "quant/q4_0x16.h"

namespace df::experts {

// One expert: gate and up are n_ff rows of n_embd values, down is n_embd rows of n_ff values, each in its
// block type, in ggml's row layout or repacked (quant::preferred_packing of its type and row count).
struct ExpertView {
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
  GgmlType gate_type = GgmlType::F32;
  GgmlType up_type = GgmlType::F32;
  GgmlType down_type = GgmlType::F32;
  quant::RowPacking gate_packing = quant::RowPacking::kNone;
  quant::RowPacking up_packing = quant::RowPacking::kNone;
  quant::RowPacking down_packing = quant::RowPacking::kNone;

  backend::Weight gate_weight(int64_t n_embd, int64_t n_ff) const {
    return {gate_type, gate, n_embd, n_ff, gate_packing};
  }
  backend::Weight up_weight(int64_t n_embd, int64_t n_ff) const {
    return {up_type, up, n_embd, n_ff, up_packing};
  }
  backend::Weight down_weight(int64_t n_embd, int64_t n_ff) const {
    return {down_type, down, n_ff, n_embd, down_packing};
  }
};

// Where the experts of one MoE layer live in the GGUF: ffn_{gate,up}_exps {n_embd, n_ff, n_expert} and
// ffn_down_exps {n_ff, n_embd, n_expert}; expert e is the e-th slab of each. Gate and up may instead be one
// fused ffn_gate_up_exps {n_embd, 2·n_ff, n_expert} that gate_name and up_name both name: each expert's slab
// holds its gate rows, then its up rows (llama.cpp's create_tensor_gate_up_exps and build_moe_ffn).
struct ExpertLayerLayout {
  int model_layer = 0;
  int n_expert = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  std::string gate_name, up_name, down_name;
  GgmlType gate_type = GgmlType::F32, up_type = GgmlType::F32, down_type = GgmlType::F32;
  // The first row of an expert's gate (up) matrix in its slab of gate_name (up_name): 0 for a tensor of its
  // own; 0 and n_ff in a fused one.
  int64_t gate_row0 = 0, up_row0 = 0;

  bool gate_up_fused() const { return !gate_name.empty() && gate_name == up_name; }
  // Rows of one expert's slab of the gate (and up) tensor.
  int64_t gate_up_slab_rows() const { return gate_up_fused() ? 2 * n_ff : n_ff; }
  // One matrix's bytes (one part of a fused slab).
  size_t gate_bytes() const { return ggml_row_bytes(gate_type, n_embd) * static_cast<size_t>(n_ff); }
  size_t up_bytes() const { return ggml_row_bytes(up_type, n_embd) * static_cast<size_t>(n_ff); }
  size_t down_bytes() const { return ggml_row_bytes(down_type, n_ff) * static_cast<size_t>(n_embd); }
};

// Indexed by MoE layer (0 = the first MoE layer of the model).
struct ExpertLayout {
  std::vector<ExpertLayerLayout> layers;
  // Blocks of the file from this index on are not run (trailing multi-token-prediction blocks, hy_v3): a
  // store ingested from the file may hold their experts after the model's.
  int unrun_from_layer = std::numeric_limits<int>::max();
};

// One part of a layer's experts spread over several backends (expert parallel: models/expert_parallel.h):
// experts [first_expert, end_expert) live in `backend`'s memory and are computed there.
struct ExpertPart {
  backend::Backend* backend = nullptr;
  int first_expert = 0, end_expert = 0;
};

// The routed op a device tier's experts are pinned for (routed_slots).
struct RoutedOp {
  backend::ActivationParams act{};
  int k = 0;
  bool gate_up_biases = false;
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;
  // Guessed ids of a later MoE layer: start fetching them if that helps. Never required for correctness.
  virtual void prefetch(int moe_layer, std::span<const int32_t> guessed_ids) = 0;
  // False when prefetch() does nothing (every expert already in place): the model then skips computing the
  // guesses (the next layers' routers), which costs a decode step a router pass per MoE layer.
  virtual bool uses_prefetch() const { return true; }
  // Starts now what prefetch() left queued for the next acquire (a device tier issues its guesses' copies
  // after those of the layer acquired next, which share its link): a layer split calls it for a stage about
  // to run, whose first layers the stage before guessed. Optional.
  virtual void start_prefetches() {}
  // The ids the model is about to acquire for this layer (each once), so that a disk provider can issue
  // every read at once before the first acquire() waits. Optional.
  virtual void will_acquire(int /*moe_layer*/, std::span<const int32_t> /*ids*/) {}
  // Every expert of the layer in the backend's memory as three stacks (backend::RoutedExperts without
  // biases), when this provider holds them all there for good; none otherwise. The model may then let the
  // backend pick the experts from the routing ids on the device (Backend::routed_ffn) instead of acquiring
  // them.
  virtual std::optional<backend::RoutedExperts> resident_stacks(int /*moe_layer*/) const {
    return std::nullopt;
  }
  // For a provider whose experts move between slots in the backend's memory (a device tier): pins every
  // expert of `used` (each id once) there and returns the layer's stacks with the expert->slot map
  // (RoutedExperts::slot_of), so that the backend picks the experts from the routing ids on the device
  // exactly as from resident stacks (the same kernels, the same bits); none when the provider cannot.
  // release_routed() unpins them after the op is issued.
  //
  // `op` describes the routed op the experts are for, so that a provider may leave some experts in host
  // memory (RoutedExperts::host) where the backend computes them from there to the same bits
  // (Backend::computes_host_experts); the default (k = 0) asks for none.
  virtual std::optional<backend::RoutedExperts> routed_slots(int /*moe_layer*/,
                                                             std::span<const int32_t> /*used*/,
                                                             const RoutedOp& /*op*/ = {}) {
    return std::nullopt;
  }
  virtual void release_routed(int /*moe_layer*/, std::span<const int32_t> /*used*/) {}
  // How many of a layer's experts may be held (acquired and not yet released) at once, so that a prefill
  // chunk's experts go to the backend in as few grouped FFNs as that allows; 0: only what one decode step
  // holds (the model's top-k), the safe default for a provider that must find room for each acquire.
  virtual size_t max_held(int /*moe_layer*/) const { return 0; }
  // Lets go of every pin held beyond the experts in use (a device tier's RAM records of copies issued or
  // pending, announced experts never acquired), so that another provider sharing the cache below has all of
  // it: a layer split (models/layer_split.h) calls it once a stage has run its layers. Optional.
  virtual void release_spare() {}
  // The parts of a layer's experts when they are spread over several backends, in expert order (the views
  // acquire() gives lie in each part's backend's memory; the model sends each part the rows routed to it
  // and gathers the results on its own backend); empty: every expert is in the model's backend.
  virtual std::span<const ExpertPart> parts(int /*moe_layer*/) const { return {}; }
  // The bytes of a constant table in the model's backend (a layer's per-expert biases) in part `part`'s
  // memory, copied there on first use and kept: what a part's FFNs read instead. Only for a provider with
  // parts.
  virtual backend::Buf<const float> part_copy(size_t part, backend::Buf<const float> of_model);
  // A view valid until the matching release(). Throws df::Error for an id out of range or a failed read.
  virtual ExpertView acquire(int moe_layer, int expert) = 0;
  virtual void release(int moe_layer, int expert) = 0;
};

}  // namespace df::experts

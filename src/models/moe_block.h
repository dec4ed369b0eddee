#pragma once
// The MoE block the architectures share: routing buffers, grouping a batch's (token, slot) entries by expert,
// the prefetch guesses with the next layers' routers, leases on a wave of experts, waves of SwiGLU experts
// through the backend's grouped FFN, and the weighted combine. Each model keeps only its router and, where
// its experts differ (gpt-oss), its own expert compute.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "models/expert_provider.h"
#include "models/model.h"

namespace df::models {

struct SequenceBatch;  // sequence_state.h

// An array in the backend's memory that only grows: resize() reallocates (losing the contents) when it
// needs more, so a decode loop that never outgrows its first batch allocates nothing.
template <class T>
class DeviceArray {
 public:
  void resize(backend::Backend& be, size_t count, const char* what) {
    if (count > capacity_) {
      memory_ = be.alloc_array<T>(count, what);
      capacity_ = count;
    }
    count_ = count;
  }
  backend::Buf<T> view() const { return memory_.as<T>().first(count_); }
  size_t size() const { return count_; }
  size_t capacity() const { return capacity_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  backend::DeviceBuffer memory_;
  size_t count_ = 0, capacity_ = 0;
};

// Routing, per-expert batches and prefetch guesses for a batch of tokens. reserve() only grows them, so
// decoding allocates nothing. The backend computes routing into its own memory; the host reads the ids
// back (the one crossing a MoE layer needs: it picks which experts to fetch), groups the batch by expert
// and hands the groups' row lists back for the expert FFNs.
struct MoeBuffers {
  DeviceArray<float> router_logits, expert_weights, expert_out;
  DeviceArray<int32_t> expert_ids;
  std::vector<int32_t> expert_ids_host;  // expert_ids, read back
  // Per-expert batches: the (token, slot) entries routed to each expert, grouped by expert, and the token
  // of each of those entries (host, then uploaded as the FFNs' output and input row lists).
  std::vector<int32_t> expert_count, expert_start, expert_entries, entry_tokens, used;
  DeviceArray<int32_t> expert_entries_dev, entry_tokens_dev;
  // Prefetch guesses.
  DeviceArray<float> guess_xn, guess_logits, guess_weights;
  DeviceArray<int32_t> guess_ids;
  std::vector<int32_t> guess_ids_host, guess_list;
  std::vector<uint8_t> guess_mask;

  // Experts spread over several backends (ExpertProvider::parts): every entry's result in the grouped order
  // (the parts' results side by side), gathered from there into expert_out by each entry's place in that
  // order; 0, 1, 2, ... (where a part's FFNs write); and, for each part on another backend, its copy of the
  // input, its input row lists, its 0, 1, 2, ... and its results. Sized by the first batches that need them.
  struct PartBuffers {
    DeviceArray<float> xn, out;
    DeviceArray<int32_t> in_rows, positions;
  };
  DeviceArray<float> grouped_out;
  DeviceArray<int32_t> grouped_pos_dev, positions_dev;
  std::vector<int32_t> grouped_pos, positions;
  std::vector<float> xn_host, rows_host;  // rows on their way between backends
  std::vector<PartBuffers> part_buffers;

  void reserve(backend::Backend& be, size_t tokens, size_t n_embd, size_t n_expert, size_t k);
  size_t bytes() const;  // what ModelState::bytes() counts of these buffers
  // What bytes() is after reserve(tokens, n_embd, n_expert, k), without allocating.
  static size_t bytes_for(size_t tokens, size_t n_embd, size_t n_expert, size_t k);
};

// Groups the T·k (token, slot) entries of expert_ids_host by expert, tokens in order within each expert:
// expert entries of expert e are expert_entries[expert_start[e] ..] (expert_count[e] of them, each
// token · k + slot) with their tokens in entry_tokens. Lists the experts with at least one entry in
// used[0..n), ascending, and returns n.
size_t group_by_expert(MoeBuffers& b, int64_t T, int k, int n_expert);
// Reads the routing ids back and groups them (group_by_expert).
size_t fetch_groups(backend::Backend& be, MoeBuffers& b, int64_t T, int k, int n_expert);
// Uploads the groups' row lists, which the grouped FFNs of run_experts read (the routed op does not).
void upload_groups(backend::Backend& be, MoeBuffers& b, int64_t T, int k);

// The distinct experts of guess_ids_host (T·k entries), ascending, into guess_list; returns how many.
size_t guessed_experts(MoeBuffers& b, int64_t T, int k, int n_expert);

// The seed's prefetch rule: the routers of the next `lookahead` MoE layers applied to the current state.
// route_guess(target) routes the batch with MoE layer target's router into b.guess_ids; only the provider
// sees the result (read back to the host).
template <class RouteGuess>
void prefetch_next_layers(backend::Backend& be, ExpertProvider& experts, MoeBuffers& b, int moe_index,
                          int n_moe, int lookahead, int64_t T, int k, int n_expert,
                          RouteGuess&& route_guess) {
  if (!experts.uses_prefetch()) return;
  for (int ahead = 1; ahead <= lookahead && moe_index + ahead < n_moe; ++ahead) {
    const int target = moe_index + ahead;
    route_guess(target);
    be.download(b.guess_ids_host.data(), backend::Buf<const int32_t>(b.guess_ids.view()),
                static_cast<size_t>(T * k));
    const size_t n = guessed_experts(b, T, k, n_expert);
    experts.prefetch(target, std::span<const int32_t>(b.guess_list.data(), n));
  }
}

// The ffn_norm → router matmul → backend routing of lfm2moe and qwen3moe: the norm of x into xn, the
// router's logits, then the ids and weights of the k experts of every token.
struct RouterInputs {
  const backend::RouterParams& params;
  backend::Buf<const float> ffn_norm;
  float eps;
  const backend::Weight& router;
};
// Where a routing goes: the normed input, the logits, the ids and weights of the k chosen experts.
struct RoutingOut {
  backend::Buf<float> xn, logits;
  backend::Buf<int32_t> ids;
  backend::Buf<float> weights;
};
void route_normed(backend::Backend& be, const RouterInputs& r, backend::Buf<const float> x, int64_t T,
                  int64_t n_embd, backend::Buf<uint8_t> scratch, const RoutingOut& out);

// The experts of one wave, released (in acquisition order) on every path out of the scope.
class WaveLeases {
 public:
  WaveLeases(ExpertProvider& p, int layer, int32_t* held) : p_(p), layer_(layer), held_(held) {}
  ~WaveLeases() {
    for (size_t i = 0; i < n_; ++i) p_.release(layer_, held_[i]);
  }
  WaveLeases(const WaveLeases&) = delete;
  WaveLeases& operator=(const WaveLeases&) = delete;

  ExpertView acquire(int32_t expert) {
    const ExpertView v = p_.acquire(layer_, expert);
    held_[n_++] = expert;
    return v;
  }

 private:
  ExpertProvider& p_;
  int layer_;
  int32_t* held_;  // room for a whole wave
  size_t n_ = 0;
};

// One wave of experts: the ids held and the FFNs handed to the backend. A wave is k experts (what a decode
// step pins anyway) when the provider pins what it hands out, the whole layer when it holds every expert
// (room for n_expert: reserve(k, n_expert)).
struct ExpertWave {
  std::vector<int32_t> ids;
  std::vector<backend::FfnTask> tasks;
  size_t k = 0;
  void reserve(size_t k_used, size_t n_expert) {
    k = k_used;
    ids.resize(n_expert);
    tasks.resize(n_expert);
  }
  size_t bytes() const { return ids.size() * sizeof(int32_t) + tasks.size() * sizeof(backend::FfnTask); }
  static size_t bytes_for(size_t n_expert) { return n_expert * (sizeof(int32_t) + sizeof(backend::FfnTask)); }
};

// Per-expert biases of a MoE layer (gpt-oss): n_expert rows each of gate/up (n_ff) and down (n_embd); null
// when the architecture has none. down_scale (gemma4's ffn_down_exps.scale): one factor per expert on its
// down projection's output, in the backend's memory for the routed op and on the host for the grouped FFNs.
struct ExpertBiases {
  backend::Buf<const float> gate, up, down;
  backend::Buf<const float> down_scale{};
  std::span<const float> down_scale_host{};
};

// The chosen experts (b.used[0..n_used)), gated FFNs of n_embd → n_ff → n_embd with the given activation
// (and biases), each applied to its tokens of xn: expert_out row (token · k + slot) gets its output for that
// token. Waves of up to k experts (up to ExpertProvider::max_held when the provider can hold more: every
// chosen expert when it holds them all or a device tier has pinned them) are acquired, run as one backend
// ffn() and released (see moe_block.cpp).
void run_experts(backend::Backend& be, ExpertProvider& experts, int moe_index, MoeBuffers& b, size_t n_used,
                 ExpertWave& wave, const backend::ActivationParams& act, const ExpertBiases& biases,
                 backend::Buf<const float> xn, int64_t T, int64_t n_embd, int64_t n_ff);

// x += each token's chosen experts (the routing in b.expert_ids) weighted by b.expert_weights, summed in slot
// order: on the device from the ids (Backend::routed_ffn_add, b.expert_out its scratch) when the provider
// holds every expert in the backend's memory or a device tier and the batch is one the backend routes that
// way (a decode step: no host round trip), else the ids read back, grouped by expert and run in waves
// (fetch_groups, upload_groups, run_experts) into b.expert_out, then Backend::moe_combine_add.
struct ExpertFfn {
  const backend::ActivationParams& act;
  const ExpertBiases& biases;
  int k, n_expert;
  int64_t n_embd, n_ff;
};
void add_experts(backend::Backend& be, ExpertProvider& experts, int moe_index, MoeBuffers& b,
                 ExpertWave& wave, const ExpertFfn& f, backend::Buf<const float> xn, int64_t T,
                 backend::Buf<float> x);

// Hands MoE layer moe_index's choice for each sequence of the batch (its rows at its positions) to the sink
// (none: nothing), read back into b.expert_ids_host (no allocation: it holds a batch's ids already).
void report_routing(backend::Backend& be, RoutingSink* sink, int moe_index, const SequenceBatch& batch, int k,
                    MoeBuffers& b);

// Records MoE layer moe_index's choice and weights in the capture (none: nothing), read back.
void capture_routing(backend::Backend& be, ForwardCapture* capture, int moe_index, int64_t T, int k,
                     const MoeBuffers& b);

}  // namespace df::models

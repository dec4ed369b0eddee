#pragma once
// `diskformer replay`'s engine: a routing trace driven through CacheBook — the expert cache's own
// bookkeeping and eviction policies, not a copy — in the order the engine acquires experts, with reads
// landing at once (no clock). At lookahead 0 the counts equal what the engine's telemetry reports for the
// same routing, budget, policy and prefill chunk (tests/test_engine_replay.cpp). At lookahead > 0 the
// engine's guesses come from the next layers' routers on the hidden state, which a trace does not hold: the
// replay guesses from the trace instead (GuessKind) and lets every guess land before its layer.
//
// A trace's batches: consecutive prompt rows of one layer form one prefill batch (cut at prefill_chunk, as
// the engine cuts a prompt), every decode row is a batch of one token. Engine order acquires a batch's
// distinct experts in ascending id order, in waves of k (moe_block.cpp); trace order acquires each row's ids
// in the router's order, one row at a time (the order llama.cpp traces' published hit rates use).
#include <cstdint>
#include <vector>

#include "stream/cache_telemetry.h"
#include "stream/eviction_policy.h"
#include "stream/routing_trace.h"

namespace df::stream {

enum class AccessOrder { kEngine, kTrace };
enum class GuessKind {
  kPreviousToken,  // the guess for layer l is what layer l chose for the previous token
  kOracle,         // the ids the token will choose at layer l (a perfect router guess: an upper bound)
};
enum class PrefillMode {
  kCached,  // prompt rows go through the cache like decode rows
  kBypass,  // prompt rows are read past the cache: counted as reads, they neither hit nor evict
  kSkip,    // prompt rows are not replayed at all (decode rows only)
};

// The RAM tier under a device tier: inclusive as the engine runs it (a record copied up keeps its RAM slot
// until the RAM policy evicts it), or exclusive, a study the engine does not run: a record copied up leaves
// RAM, and one the device tier evicts is copied down into RAM (one LRU stack over both tiers' slots).
enum class RamTier { kInclusive, kExclusive };

struct ReplayOptions {
  uint64_t slots = 0;  // one cache of this many slots for every layer (as the engine)
  // Per-layer caches instead, of these sizes (index = layer; size n_layers) when not empty.
  std::vector<int> layer_slots;
  PolicyKind policy = PolicyKind::kLru;
  PolicyOptions policy_options;
  int lookahead = 0;
  GuessKind guess = GuessKind::kPreviousToken;
  AccessOrder order = AccessOrder::kEngine;
  PrefillMode prefill = PrefillMode::kCached;
  int prefill_chunk = 64;
  int n_expert = 0;     // experts per layer of the model (0: the trace's highest id + 1)
  bool belady = false;  // Belady's offline optimum instead of `policy` (no lookahead)
  // A device tier of this many slots (same policy) above the cache of `slots`, which becomes the RAM tier,
  // driven as TieredExpertProvider drives them (0: none). One shared cache only.
  uint64_t device_slots = 0;
  RamTier ram_tier = RamTier::kInclusive;
};

struct ReplayResult {
  std::vector<LayerCounters> layers;         // everything replayed, per layer
  std::vector<LayerCounters> decode_layers;  // the decode rows' batches only
  LayerCounters total, decode;
  uint64_t decode_tokens = 0, prompt_tokens = 0;
  uint64_t slots = 0;  // in all

  // With a device tier, the counters above are the RAM tier's (its reads come from disk) and these the
  // device tier's (its reads are copies up).
  std::vector<LayerCounters> device_layers, device_decode_layers;
  LayerCounters device_total, device_decode;
  uint64_t device_slots = 0;

  double hit_rate() const;  // over decode accesses (all accesses when the trace has no decode rows)
  double layer_hit_rate(int l) const;  // the same, for one layer
  double reads_per_token() const;      // records read per decode token
  double device_hit_rate() const;      // the device tier's, over decode accesses
  double copies_per_token() const;     // records copied up per decode token
};

// Throws df::Error when the budget cannot hold one batch's experts, or options contradict each other.
// With device_slots, replay_two_tiers.
ReplayResult replay_trace(const RoutingTrace& trace, const ReplayOptions& options);

// A device tier above a RAM tier (stream/tier_replay.cpp). At lookahead 0 and with an inclusive RAM tier the
// counts of both tiers equal the engine's for a device tier in host memory (tests/test_engine_replay.cpp);
// guesses land at once, as in replay_trace.
ReplayResult replay_two_tiers(const RoutingTrace& trace, const ReplayOptions& options);

// Per-layer cache sizes (each >= k) summing to n_layers * slots_per_layer, split by the trace's reuse:
// greedy on the marginal LRU hits of each layer's decode rows (Mattson's stack distances), which is the
// best split LRU can get in hindsight.
std::vector<int> learned_layer_split(const RoutingTrace& trace, int slots_per_layer);

// Read-ahead guesses judged on a trace's decode rows: precision = guessed ids used / ids guessed,
// recall = ids used that were guessed / ids used.
struct GuessQuality {
  double precision = 0, recall = 0;
  uint64_t guessed = 0, used = 0, correct = 0;
};
enum class GuessRule {
  kPreviousToken,         // layer l of token t guessed as layer l of token t-1
  kPreviousTokens4,       // ... the union of tokens t-1..t-4
  kPreviousLayerSameIds,  // layer l guessed as the ids layer l-1 chose for the same token
};
GuessQuality guess_quality(const RoutingTrace& trace, GuessRule rule);

}  // namespace df::stream

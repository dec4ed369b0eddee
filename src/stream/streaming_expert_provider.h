#pragma once
// The model's door to the expert cache: experts::ExpertProvider over ExpertCache. will_acquire() pins a
// layer's experts and queues every miss at once; acquire() then waits for one record only, so the model
// computes on the first resident expert while the others still arrive. Views point into the slot memory at
// the part offsets of the store layout. A union larger than the cache (a big prefill chunk) is announced as
// far as it fits; the engine should still size chunks with max_prefill_chunk() so that all reads overlap.
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "experts/expert_provider.h"
#include "stream/expert_cache.h"

namespace df::stream {

// Throws df::Error when the store's records do not hold what the model expects (layer count, expert count,
// part types and sizes): a store ingested from another file.
void check_layout_matches(const store::Layout& store_layout, const experts::ExpertLayout& model_layout,
                          const std::string& store_path);

class StreamingExpertProvider final : public experts::ExpertProvider {
 public:
  explicit StreamingExpertProvider(ExpertCache& cache);

  void prefetch(int moe_layer, std::span<const int32_t> guessed_ids) override;
  void will_acquire(int moe_layer, std::span<const int32_t> ids) override;
  experts::ExpertView acquire(int moe_layer, int expert) override;
  void release(int moe_layer, int expert) override;
  void release_spare() override;
  // After a failed step: drops every pin this provider (and anyone else) holds on the cache.
  void abandon();

  ExpertCache& cache() { return cache_; }

 private:
  int key_checked(int moe_layer, int expert, const char* what) const;
  void release_unclaimed();

  ExpertCache& cache_;
  std::mutex mu_;
  std::vector<int32_t> announced_slot_;  // per key: pinned by will_acquire, not yet acquired; -1 otherwise
  std::vector<int32_t> announced_keys_;  // keys announced by the last will_acquire
  std::vector<int32_t> held_slot_;       // per key: the slot acquire() handed out
  std::vector<int32_t> held_count_;      // per key: acquisitions not yet released
  std::vector<ExpertHandle> scratch_;
};

}  // namespace df::stream

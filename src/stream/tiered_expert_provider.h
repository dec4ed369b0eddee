#pragma once
// Experts in two cache tiers above the store (DESIGN.md "The expert cache"; issue: the GPU expert cache in
// three tiers): record slots in the backend's memory (VRAM on a GPU; backend/record_slots.h) fed from the
// RAM tier (an ExpertCache of host slots, page-locked for the device), fed from the store on disk. Each tier
// has its own CacheBook (its policy, pins, guesses). A record copied up stays in RAM until the RAM tier's
// policy evicts it, so a record evicted from the device tier is found again in RAM.
//
//   will_acquire(layer, ids)  pins the layer's experts in the device tier; each miss pins its record in
//                             RAM, which queues every disk read of the layer at once
//   acquire(layer, e)         waits for that record in RAM (df::Error for a failed or corrupt read, naming
//                             it), starts its copy up and returns a view of the device slot: ops issued
//                             after it read the new bytes (the device orders them after the copy)
//   release(layer, e)         unpins; a later fill of the slot waits (on the device) for the ops issued
//                             so far
//   prefetch(layer, ids)      guesses: read from disk into RAM; those already in RAM are copied up after
//                             the copies of the next layer acquired (compute waits for a guess's copy only
//                             when it is acquired, so it travels while the layers before it compute)
//
// The bytes are the store's, converted to the backend's packing on the way up, so the output never depends
// on the tiers. Written once for every backend: on the CPU backend the device tier is host memory, which is
// how CI tests the chain without a GPU.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "experts/expert_provider.h"
#include "stream/cache_book.h"
#include "stream/cache_telemetry.h"
#include "stream/expert_cache.h"

namespace df::stream {

struct DeviceTierOptions {
  uint64_t slots = 0;      // device slots (more than the store has records is trimmed)
  uint64_t min_slots = 1;  // one layer's top-k: fewer is an error
  PolicyKind policy = PolicyKind::kLru;
  PolicyOptions policy_options;
  // --cpu-misses: a decode step's experts missing from the device tier are computed by the backend from their
  // RAM records (where it can, to the same bits) instead of being copied up, but for miss_copies of them a
  // layer (guesses copied up for the layer included), so that the link and the host work side by side.
  bool cpu_misses = false;
  int miss_copies = 1;
  std::function<void(const std::string&)> notice;  // says once when cpu_misses cannot apply
};

class TieredExpertProvider final : public experts::ExpertProvider {
 public:
  // `ram` must outlive this provider; its slot memory is registered with the backend for fast copies.
  TieredExpertProvider(ExpertCache& ram, backend::Backend& backend, const DeviceTierOptions& options);
  ~TieredExpertProvider() override;
  TieredExpertProvider(const TieredExpertProvider&) = delete;
  TieredExpertProvider& operator=(const TieredExpertProvider&) = delete;

  void prefetch(int moe_layer, std::span<const int32_t> guessed_ids) override;
  // Issues the queued guesses' copies now instead of after the next acquire's.
  void start_prefetches() override;
  void will_acquire(int moe_layer, std::span<const int32_t> ids) override;
  experts::ExpertView acquire(int moe_layer, int expert) override;
  // The device slots as a stack with the expert->slot map of the layer uploaded to the backend (one small
  // upload per layer and step); the routed op then indexes the slots on the device.
  // With DeviceTierOptions::cpu_misses and a backend that computes such experts from host memory, the
  // experts of `used` that are not in the tier (nor on their way) stay in their RAM records
  // (RoutedExperts::host), except the first miss_copies of the layer (less the guesses copied up for it).
  std::optional<backend::RoutedExperts> routed_slots(int moe_layer, std::span<const int32_t> used,
                                                     const experts::RoutedOp& op = {}) override;
  void release_routed(int moe_layer, std::span<const int32_t> used) override;
  // Every device slot: will_acquire pins a prefill chunk's experts of the layer (the chunk is sized so that
  // they fit), so they can all be held for one grouped FFN.
  size_t max_held(int) const override { return static_cast<size_t>(book_.n_slots()); }
  void release(int moe_layer, int expert) override;
  // Issues the copies still pending, waits for every copy that reads a RAM record, and unpins those records
  // and the announced experts never acquired: the RAM tier is then free for another device's tier.
  void release_spare() override;
  // After a failed step: drops every pin in both tiers.
  void abandon();

  uint64_t slots() const { return static_cast<uint64_t>(book_.n_slots()); }
  uint64_t slot_bytes() const { return record_bytes_; }
  const char* policy_name() const { return book_.policy_name(); }
  bool resident(int moe_layer, int expert) const;  // in a device slot, copied
  // "8 slots x 4.50 MiB = 0.04 GiB of VRAM, lru".
  std::string describe() const;
  // The device tier: accesses, hits and misses of its slots, its copies up as `reads` (bytes over the link).
  TelemetrySnapshot telemetry() const;
  void reset_telemetry();
  void record_step(uint64_t tokens, uint64_t step_ns);
  ExpertCache& ram() { return ram_; }

 private:
  int key_checked(int moe_layer, int expert, const char* what) const;
  int pin(int moe_layer, int expert);
  void start_copies(bool allow_guess);
  void finish_copy(int slot);
  void release_host_copies(bool wait);
  void finish_host_read(int slot);
  void make_ram_room();
  void finish_every_copy();
  void release_unclaimed();
  void issue_guess_copies();
  void announce(int moe_layer, std::span<const int32_t> ids);  // will_acquire under the lock
  int acquire_slot(int moe_layer, int expert);                 // acquire under the lock: the slot
  void release_locked(int moe_layer, int expert);
  experts::ExpertView view_of(int slot, int moe_layer) const;
  bool host_capable(int moe_layer, const experts::RoutedOp& op);
  void release_host_experts();

  ExpertCache& ram_;
  backend::Backend& backend_;
  uint64_t record_bytes_;
  int n_expert_;
  std::unique_ptr<backend::RecordSlots> slots_;
  CacheTelemetry telemetry_;
  CacheBook book_;
  std::vector<std::array<backend::RecordPart, 3>> parts_;  // per MoE layer: gate, up, down as stored
  mutable std::mutex mu_;

  // Per device slot.
  std::vector<ExpertHandle> ram_pin_;  // the RAM record a copy reads (or will read); slot -1: none
  std::vector<uint8_t> copy_pending_;  // the RAM record is pinned, the copy not yet issued
  std::vector<uint8_t> host_reading_;  // the copy is issued and may still read the RAM record
  int ram_pins_ = 0;
  // Per key, as in StreamingExpertProvider.
  std::vector<int32_t> announced_slot_;
  std::vector<int32_t> announced_keys_;
  std::vector<int32_t> held_slot_;
  std::vector<int32_t> held_count_;
  std::vector<int32_t> guess_scratch_;
  // The expert->slot map in the backend's memory, one row of n_expert per MoE layer, and its host copy.
  backend::DeviceBuffer slot_map_;
  std::vector<int32_t> slot_map_host_;
  // --cpu-misses: the options, per MoE layer whether the backend computes its experts from host memory
  // (-1: not asked yet) and the guesses copied up for it since its last step; the current step's host
  // experts, their RAM pins, and the experts pinned in the device tier.
  bool cpu_misses_ = false;
  int miss_copies_ = 1;
  std::function<void(const std::string&)> notice_;
  bool refused_noticed_ = false;
  std::vector<int8_t> host_capable_;
  std::vector<int32_t> guess_copies_;
  std::vector<backend::HostExpert> host_experts_;
  std::vector<ExpertHandle> host_pins_;
  std::vector<int32_t> device_ids_;
};

}  // namespace df::stream

// replay_two_tiers: a routing trace through a device tier above a RAM tier, each a CacheBook, in the order
// TieredExpertProvider (stream/tiered_expert_provider.cpp) pins, copies and releases: a layer's experts
// announced (device pins, and a RAM pin for each device miss, which queues its disk read), each acquired
// (its RAM record waited for and copied up), released after its wave; the RAM pins of the copies go back at
// the next announce, in device slot order, as the engine's finished copies do. Reads land at once.
#include <algorithm>
#include <memory>

#include "stream/cache_book.h"
#include "stream/cache_budget.h"
#include "stream/trace_replay.h"
#include "stream/trace_steps.h"
#include "util/error.h"

namespace df::stream {
namespace {

class TwoTiers {
 public:
  TwoTiers(int n_layers, int n_expert, uint64_t device_slots, uint64_t ram_slots, const ReplayOptions& o)
      : exclusive_(o.ram_tier == RamTier::kExclusive),
        n_expert_(n_expert),
        ram_(n_layers, n_expert, ram_slots, o),
        device_telemetry_(n_layers),
        device_(replay_book_options(n_layers, n_expert, device_slots, o), device_telemetry_),
        ram_pin_(device_slots, -1),
        copy_pending_(device_slots, 0),
        host_reading_(device_slots, 0) {
    if (exclusive_)
      device_.set_evict_listener(
          {this, [](void* self, int key) { static_cast<TwoTiers*>(self)->copy_down(key); }});
  }

  CacheTelemetry& ram_telemetry() { return ram_.telemetry(); }
  CacheTelemetry& device_telemetry() { return device_telemetry_; }
  CacheBook& device() { return device_; }
  uint64_t disk_reads() const { return ram_.reads(); }  // of every layer
  uint64_t copies() const { return copies_; }           // of every layer

  // TieredExpertProvider::prefetch: the guesses the device tier does not hold read into RAM (landing at once
  // here), then queued in the device tier; their copies go at the next announce or acquire.
  void prefetch(int layer, std::span<const int32_t> ids) {
    release_host_copies();
    scratch_.clear();
    for (int32_t e : ids)
      if (device_.slot_of(device_.key_of(layer, e)) < 0) scratch_.push_back(e);
    if (ram_.book().prefetch(layer, scratch_)) ram_.drain();
    std::erase_if(scratch_, [&](int32_t e) { return !ram_ready(layer, e); });
    if (!scratch_.empty()) device_.prefetch(layer, scratch_);
  }

  // will_acquire: the first ids that both tiers can pin at once are pinned (announced).
  void announce(int layer, std::span<const int32_t> ids, std::vector<int>& slots) {
    issue_guess_copies();
    release_host_copies();
    device_.enter_layer(layer);
    const size_t n = std::min(
        {ids.size(), static_cast<size_t>(device_.n_slots()), static_cast<size_t>(ram_.book().n_slots())});
    slots.assign(ids.size(), -1);
    for (size_t i = 0; i < n; ++i) slots[i] = pin(layer, ids[i]);
    start_copies();
  }

  // acquire: an announced slot, or a new pin; its copy finished.
  int acquire(int layer, int expert, int announced) {
    issue_guess_copies();
    int slot = announced;
    if (slot < 0) {
      device_.enter_layer(layer);
      slot = pin(layer, expert);
      start_copies();
    }
    finish_copy(slot);
    return slot;
  }

  void release(int slot) { device_.unpin(slot); }

  // After a step (exclusive study): the device tier's victims come down into RAM, into the room the records
  // copied up have left.
  void settle() {
    for (int key : copied_down_) ram_.book().insert_ready(key / n_expert_, key % n_expert_);
    copied_down_.clear();
  }

 private:
  bool ram_ready(int layer, int expert) {
    const CacheBook& ram = ram_.book();
    const int s = ram.slot_of(ram.key_of(layer, expert));
    return s >= 0 && ram.state(s) == CacheBook::State::kReady;
  }

  int pin(int layer, int expert) {
    const int s = device_.pin(layer, expert);
    if (s < 0) fail("replay: no device slot for MoE layer {} expert {}", layer, expert);
    return s;
  }

  bool ram_full() { return ram_pins_ >= ram_.book().n_slots(); }

  // The RAM record of device slot `slot`'s key pinned for its copy up (a miss queues its disk read).
  void pin_for_copy(int slot, int key) {
    ram_.book().enter_layer(key / n_expert_);
    ram_pin_[static_cast<size_t>(slot)] = ram_.pin(key / n_expert_, key % n_expert_);
    ++ram_pins_;
    copy_pending_[static_cast<size_t>(slot)] = 1;
  }

  // The copy into `slot` has read its RAM record: the pin goes (and, exclusive, the record leaves RAM).
  void finish_host_read(int slot) {
    const size_t us = static_cast<size_t>(slot);
    if (!host_reading_[us]) return;
    host_reading_[us] = 0;
    ram_.book().unpin(ram_pin_[us]);
    if (exclusive_) ram_.book().drop(ram_pin_[us]);
    ram_pin_[us] = -1;
    --ram_pins_;
  }

  void release_host_copies() {
    for (size_t s = 0; s < host_reading_.size(); ++s) finish_host_read(static_cast<int>(s));
  }

  void make_ram_room() {
    if (!ram_full()) return;
    release_host_copies();
    if (!ram_full()) return;
    for (size_t s = 0; s < copy_pending_.size(); ++s)
      if (copy_pending_[s]) finish_copy(static_cast<int>(s));
    release_host_copies();
  }

  void start_copies() {
    bool guess = false;
    for (int s; (s = device_.start_read(false, &guess)) >= 0;) {
      finish_host_read(s);
      const int key = device_.key(s);
      make_ram_room();
      // A victim of this step asked for again is still on its way down: it lands first.
      if (const auto it = std::find(copied_down_.begin(), copied_down_.end(), key);
          it != copied_down_.end()) {
        copied_down_.erase(it);
        ram_.book().insert_ready(key / n_expert_, key % n_expert_);
      }
      pin_for_copy(s, key);
    }
  }

  void finish_copy(int slot) {
    const size_t us = static_cast<size_t>(slot);
    if (!copy_pending_[us]) return;
    ram_.drain();
    copy_pending_[us] = 0;
    host_reading_[us] = 1;
    device_.finish_read(slot, true);
    ++device_telemetry_.layer(device_.key(slot) / n_expert_).reads;
    ++copies_;
    if (exclusive_) finish_host_read(slot);  // the record moves up at once
  }

  void issue_guess_copies() {
    bool guess = false;
    for (int s; (s = device_.start_read(true, &guess)) >= 0;) {
      finish_host_read(s);
      const int key = device_.key(s);
      if (ram_full() || !ram_ready(key / n_expert_, key % n_expert_)) {
        device_.finish_read(s, false);
        continue;
      }
      pin_for_copy(s, key);
      finish_copy(s);
    }
  }

  // Exclusive study: the device tier's victim goes back into RAM (where a slot can be given) at the end of
  // the step, once the copies up have left their RAM slots.
  void copy_down(int key) { copied_down_.push_back(key); }

  bool exclusive_;
  int n_expert_;
  ReplayCache ram_;
  CacheTelemetry device_telemetry_;
  CacheBook device_;
  std::vector<int> ram_pin_;
  std::vector<uint8_t> copy_pending_, host_reading_;
  int ram_pins_ = 0;
  uint64_t copies_ = 0;
  std::vector<int32_t> scratch_;
  std::vector<int> copied_down_;
};

}  // namespace

ReplayResult replay_two_tiers(const RoutingTrace& t, const ReplayOptions& o) {
  if (!o.layer_slots.empty())
    fail("replay: a device tier sits above the one shared cache, not per-layer caches");
  if (o.belady) fail("replay: Belady's optimum is computed for one cache, not a device tier above RAM");
  if (o.prefill_chunk < 1) fail("replay: the prefill chunk must be at least 1");
  const int L = t.n_layers, E = std::max(t.n_expert, o.n_expert);
  const uint64_t all = static_cast<uint64_t>(L) * static_cast<uint64_t>(E);
  const uint64_t device_slots = std::min(o.device_slots, all), ram_slots = std::min(o.slots, all);
  if (device_slots < static_cast<uint64_t>(t.k) || ram_slots < static_cast<uint64_t>(t.k))
    fail("replay: a device tier of {} slots over a RAM tier of {} cannot hold the {} experts one token needs",
         device_slots, ram_slots, t.k);
  const TraceIndex ix(t);

  ReplayResult res;
  res.layers.assign(static_cast<size_t>(L), {});
  res.decode_layers.assign(static_cast<size_t>(L), {});
  res.device_decode_layers.assign(static_cast<size_t>(L), {});
  res.decode_tokens = ix.tokens(t, false);
  res.prompt_tokens = o.prefill == PrefillMode::kSkip ? 0 : ix.tokens(t, true);
  res.slots = ram_slots;
  res.device_slots = device_slots;

  // The engine sizes its prefill chunk to fit both tiers.
  const int chunk = max_prefill_chunk(std::min(device_slots, ram_slots), t.k, E, o.prefill_chunk);
  const std::vector<TraceStep> steps = trace_steps(t, ix, o, std::vector<int>(static_cast<size_t>(L), chunk));

  TwoTiers tiers(L, E, device_slots, ram_slots, o);
  std::vector<int32_t> used, guesses;
  std::vector<int> slots;
  std::vector<LayerCounters> bypassed(static_cast<size_t>(L));
  for (const TraceStep& st : steps) {
    if (!cached_step_ids(t, st, o, used, bypassed)) continue;
    const int l = st.layer;
    for (int ahead = 1; ahead <= o.lookahead && l + ahead < L; ++ahead) {
      step_guesses(t, ix, st, l + ahead, o.guess, guesses);
      tiers.prefetch(l + ahead, guesses);
    }
    const LayerCounters ram_before = tiers.ram_telemetry().layer(l);
    const LayerCounters device_before = tiers.device_telemetry().layer(l);
    const uint64_t disk_reads_before = tiers.disk_reads(), copies_before = tiers.copies();
    // As moe_block.cpp's run_waves (the routed op of a decode step is one wave): waves as large as the
    // device tier.
    tiers.announce(l, used, slots);
    const size_t wave = std::min(used.size(), static_cast<size_t>(tiers.device().n_slots()));
    for (size_t w0 = 0; w0 < used.size(); w0 += wave) {
      const size_t w1 = std::min(used.size(), w0 + wave);
      for (size_t i = w0; i < w1; ++i) slots[i] = tiers.acquire(l, used[i], slots[i]);
      for (size_t i = w0; i < w1; ++i) tiers.release(slots[i]);
    }
    tiers.settle();
    if (st.decode) {
      // A step's reads and copies include those of its guesses for later layers.
      LayerCounters r = counters_minus(tiers.ram_telemetry().layer(l), ram_before);
      r.reads = tiers.disk_reads() - disk_reads_before;
      res.decode_layers[static_cast<size_t>(l)].add(r);
      LayerCounters d = counters_minus(tiers.device_telemetry().layer(l), device_before);
      d.reads = tiers.copies() - copies_before;
      res.device_decode_layers[static_cast<size_t>(l)].add(d);
    }
  }
  res.device_layers.assign(static_cast<size_t>(L), {});
  for (int l = 0; l < L; ++l) {
    const size_t ul = static_cast<size_t>(l);
    res.layers[ul] = tiers.ram_telemetry().layer(l);
    res.layers[ul].add(bypassed[ul]);
    res.device_layers[ul] = tiers.device_telemetry().layer(l);
    res.total.add(res.layers[ul]);
    res.decode.add(res.decode_layers[ul]);
    res.device_total.add(res.device_layers[ul]);
    res.device_decode.add(res.device_decode_layers[ul]);
  }
  return res;
}

}  // namespace df::stream

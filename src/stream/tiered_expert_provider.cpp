#include "stream/tiered_expert_provider.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/error.h"

namespace df::stream {
namespace {

backend::RecordPart part_of(const store::ExpertPart& p) {
  return backend::RecordPart{p.offset, p.type, p.n_in, p.n_out, p.packing};
}

CacheBookOptions book_options(const store::Layout& l, const DeviceTierOptions& o) {
  CacheBookOptions b;
  b.n_layers = l.n_moe_layers;
  b.n_expert = l.n_expert;
  b.n_slots = std::min<uint64_t>(o.slots, l.n_records());
  b.record_bytes = l.record_bytes;
  b.policy = o.policy;
  b.policy_options = o.policy_options;
  if (b.n_slots < o.min_slots)
    fail(
        "the device tier of the expert cache holds {} records of {} bytes; a MoE layer uses {} at once: give "
        "--gpu-cache at least {} bytes",
        b.n_slots, l.record_bytes, o.min_slots, o.min_slots * l.record_bytes);
  return b;
}

}  // namespace

TieredExpertProvider::TieredExpertProvider(ExpertCache& ram, backend::Backend& backend,
                                           const DeviceTierOptions& options)
    : ram_(ram),
      backend_(backend),
      record_bytes_(ram.source().layout.record_bytes),
      n_expert_(ram.source().layout.n_expert),
      telemetry_(ram.source().layout.n_moe_layers),
      book_(book_options(ram.source().layout, options), telemetry_) {
  const store::Layout& l = ram.source().layout;
  if (ram.slots() < options.min_slots)
    fail("the RAM tier of the expert cache holds {} records; a MoE layer uses {} at once", ram.slots(),
         options.min_slots);
  slots_ = backend.make_record_slots(book_.n_slots(), record_bytes_);
  for (const store::MoeLayerLayout& ml : l.layers)
    parts_.push_back({part_of(ml.gate), part_of(ml.up), part_of(ml.down)});
  const size_t n_slots = static_cast<size_t>(book_.n_slots());
  ram_pin_.assign(n_slots, ExpertHandle{});
  copy_pending_.assign(n_slots, 0);
  host_reading_.assign(n_slots, 0);
  const size_t n_keys = static_cast<size_t>(l.n_records());
  announced_slot_.assign(n_keys, -1);
  held_slot_.assign(n_keys, -1);
  held_count_.assign(n_keys, 0);
  announced_keys_.reserve(static_cast<size_t>(n_expert_));
  guess_scratch_.reserve(static_cast<size_t>(n_expert_));
  slot_map_ = backend_.alloc_array<int32_t>(n_keys, "expert slot map");
  slot_map_host_.assign(static_cast<size_t>(n_expert_), 0);
  cpu_misses_ = options.cpu_misses;
  notice_ = options.notice;
  miss_copies_ = std::max(0, options.miss_copies);
  host_capable_.assign(static_cast<size_t>(l.n_moe_layers), -1);
  guess_copies_.assign(static_cast<size_t>(l.n_moe_layers), 0);
  host_experts_.reserve(static_cast<size_t>(n_expert_));
  host_pins_.reserve(static_cast<size_t>(n_expert_));
  device_ids_.reserve(static_cast<size_t>(n_expert_));
  backend_.register_host_memory(ram_.pool_data(), ram_.pool_bytes());
}

TieredExpertProvider::~TieredExpertProvider() {
  try {
    std::lock_guard lock(mu_);
    release_host_copies(/*wait=*/true);
  } catch (...) {
    // A device error at shutdown: the slots go with the backend's context anyway.
  }
  slots_.reset();
  backend_.unregister_host_memory(ram_.pool_data());
}

int TieredExpertProvider::key_checked(int moe_layer, int expert, const char* what) const {
  const store::Layout& l = ram_.source().layout;
  if (moe_layer < 0 || moe_layer >= l.n_moe_layers)
    fail("expert provider {}: MoE layer {} out of range ({} layers)", what, moe_layer, l.n_moe_layers);
  if (expert < 0 || expert >= l.n_expert)
    fail("expert provider {}: expert {} out of range (MoE layer {} has {})", what, expert, moe_layer,
         l.n_expert);
  return moe_layer * l.n_expert + expert;
}

// Copies whose bytes have left the RAM record give its pin back (all of them, waiting, with `wait`).
void TieredExpertProvider::release_host_copies(bool wait) {
  for (size_t s = 0; s < host_reading_.size(); ++s) {
    if (!host_reading_[s]) continue;
    const int slot = static_cast<int>(s);
    if (wait)
      slots_->wait_host_done(slot);
    else if (!slots_->host_done(slot))
      continue;
    host_reading_[s] = 0;
    ram_.release(ram_pin_[s]);
    ram_pin_[s] = ExpertHandle{};
    --ram_pins_;
  }
}

// A RAM pin for one more record: when the RAM tier is all pinned by copies, finish them first.
void TieredExpertProvider::make_ram_room() {
  if (static_cast<uint64_t>(ram_pins_) < ram_.slots()) return;
  release_host_copies(/*wait=*/true);
  if (static_cast<uint64_t>(ram_pins_) < ram_.slots()) return;
  finish_every_copy();
}

// Every pending copy issued and every copy waited for: no RAM record stays pinned for a copy.
void TieredExpertProvider::finish_every_copy() {
  for (size_t s = 0; s < copy_pending_.size(); ++s)
    if (copy_pending_[s]) finish_copy(static_cast<int>(s));
  release_host_copies(/*wait=*/true);
}

// A slot about to be filled again: its previous copy must be done reading its RAM record, whose pin goes.
void TieredExpertProvider::finish_host_read(int slot) {
  const size_t us = static_cast<size_t>(slot);
  if (!host_reading_[us]) return;
  slots_->wait_host_done(slot);
  host_reading_[us] = 0;
  ram_.release(ram_pin_[us]);
  --ram_pins_;
}

// Every slot the book queued gets its RAM record pinned (a RAM miss queues the disk read); the copy up is
// issued when the record is needed (finish_copy), so that every disk read of a layer is in flight first.
void TieredExpertProvider::start_copies(bool allow_guess) {
  bool guess = false;
  for (int s; (s = book_.start_read(allow_guess, &guess)) >= 0;) {
    const size_t us = static_cast<size_t>(s);
    finish_host_read(s);
    const int key = book_.key(s);
    try {
      make_ram_room();
      ram_pin_[us] = ram_.acquire(key / n_expert_, key % n_expert_);
    } catch (...) {
      ram_pin_[us] = ExpertHandle{};
      book_.finish_read(s, false);
      throw;
    }
    ++ram_pins_;
    copy_pending_[us] = 1;
  }
}

void TieredExpertProvider::finish_copy(int slot) {
  const size_t us = static_cast<size_t>(slot);
  if (!copy_pending_[us]) return;
  const ExpertHandle h = ram_pin_[us];
  const uint8_t* record = nullptr;
  try {
    record = ram_.wait(h);
  } catch (...) {
    copy_pending_[us] = 0;
    ram_.release(h);
    ram_pin_[us] = ExpertHandle{};
    --ram_pins_;
    book_.finish_read(slot, false);
    ++telemetry_.layer(h.layer).read_failures;
    throw;
  }
  const auto& parts = parts_[static_cast<size_t>(h.layer)];
  slots_->fill(slot, record, std::span<const backend::RecordPart>(parts.data(), parts.size()));
  copy_pending_[us] = 0;
  host_reading_[us] = 1;
  book_.finish_read(slot, true);
  LayerCounters& c = telemetry_.layer(h.layer);
  ++c.reads;
  c.bytes_read += record_bytes_;
}

int TieredExpertProvider::pin(int moe_layer, int expert) {
  const int s = book_.pin(moe_layer, expert);
  if (s == CacheBook::kWaitForRead)  // copies are never left in flight unpinned: only a bug gets here
    fail("expert provider: no device slot for MoE layer {} expert {} (internal error)", moe_layer, expert);
  if (book_.state(s) == CacheBook::State::kFailed) {
    book_.unpin(s);
    fail("expert provider: MoE layer {} expert {} failed to load earlier in this step", moe_layer, expert);
  }
  return s;
}

void TieredExpertProvider::prefetch(int moe_layer, std::span<const int32_t> guessed_ids) {
  std::lock_guard lock(mu_);
  release_host_copies(/*wait=*/false);
  // Guesses the device tier holds need nothing (reading them into RAM would spend the disk, and a RAM slot,
  // on a record already above it); the others are read into RAM, and those already there go up to the
  // device tier.
  guess_scratch_.clear();
  for (int32_t e : guessed_ids)
    if (book_.slot_of(key_checked(moe_layer, e, "prefetch")) < 0) guess_scratch_.push_back(e);
  ram_.prefetch(moe_layer, guess_scratch_);
  std::erase_if(guess_scratch_, [&](int32_t e) { return !ram_.resident(moe_layer, e); });
  // With --cpu-misses the link carries at most miss_copies a layer; the other guesses stay in RAM, where the
  // host computes them if they are used.
  if (cpu_misses_ && host_capable_[static_cast<size_t>(moe_layer)] == 1) {
    int32_t& copies = guess_copies_[static_cast<size_t>(moe_layer)];
    const size_t room = static_cast<size_t>(std::max(0, miss_copies_ - copies));
    if (guess_scratch_.size() > room) guess_scratch_.resize(room);
    copies += static_cast<int32_t>(guess_scratch_.size());
  }
  // The book queues them; their copies are issued by issue_guess_copies(), after those of the layer acquired
  // next. Until then a demand pin may take a queued guess's slot (the book cancels it).
  if (!guess_scratch_.empty()) book_.prefetch(moe_layer, guess_scratch_);
}

// The guessed records' copies up, left queued by prefetch() so that the copies a layer waits for go first.
void TieredExpertProvider::issue_guess_copies() {
  bool guess = false;
  for (int s; (s = book_.start_read(true, &guess)) >= 0;) {
    const size_t us = static_cast<size_t>(s);
    finish_host_read(s);
    const int key = book_.key(s);
    if (static_cast<uint64_t>(ram_pins_) >= ram_.slots() ||
        !ram_.resident(key / n_expert_, key % n_expert_)) {
      book_.finish_read(s, false);  // evicted from RAM meanwhile, or no pin to spare: drop the guess
      continue;
    }
    ram_pin_[us] = ram_.acquire(key / n_expert_, key % n_expert_);
    ++ram_pins_;
    copy_pending_[us] = 1;
    finish_copy(s);
  }
}

void TieredExpertProvider::start_prefetches() {
  std::lock_guard lock(mu_);
  release_host_copies(/*wait=*/false);
  issue_guess_copies();
}

void TieredExpertProvider::release_unclaimed() {
  for (int32_t key : announced_keys_) {
    int32_t& slot = announced_slot_[static_cast<size_t>(key)];
    if (slot < 0) continue;
    finish_copy(slot);  // a slot is not left with a copy half started
    book_.unpin(slot);
    slot = -1;
  }
  announced_keys_.clear();
}

void TieredExpertProvider::will_acquire(int moe_layer, std::span<const int32_t> ids) {
  std::lock_guard lock(mu_);
  issue_guess_copies();
  announce(moe_layer, ids);
}

void TieredExpertProvider::announce(int moe_layer, std::span<const int32_t> ids) {
  release_unclaimed();
  release_host_copies(/*wait=*/false);
  if (ids.size() > static_cast<size_t>(n_expert_))
    fail("expert provider will_acquire: {} ids for MoE layer {}, which has {} experts (each id once)",
         ids.size(), moe_layer, n_expert_);
  book_.enter_layer(moe_layer);
  // A prefill chunk's union may exceed a tier: announce what both can pin; the rest comes when acquired.
  const size_t n =
      std::min({ids.size(), static_cast<size_t>(book_.n_slots()), static_cast<size_t>(ram_.slots())});
  for (size_t i = 0; i < n; ++i) {
    const int key = key_checked(moe_layer, ids[i], "will_acquire");
    if (announced_slot_[static_cast<size_t>(key)] >= 0) continue;
    announced_slot_[static_cast<size_t>(key)] = pin(moe_layer, ids[i]);
    announced_keys_.push_back(key);
  }
  start_copies(/*allow_guess=*/false);
}

experts::ExpertView TieredExpertProvider::view_of(int slot, int moe_layer) const {
  const auto& p = parts_[static_cast<size_t>(moe_layer)];
  const auto packing = [&](const backend::RecordPart& part) {
    return backend_.preferred_packing(part.type, part.n_out);
  };
  return experts::ExpertView{slots_->part(slot, p[0].offset),
                             slots_->part(slot, p[1].offset),
                             slots_->part(slot, p[2].offset),
                             p[0].type,
                             p[1].type,
                             p[2].type,
                             packing(p[0]),
                             packing(p[1]),
                             packing(p[2])};
}

experts::ExpertView TieredExpertProvider::acquire(int moe_layer, int expert) {
  std::lock_guard lock(mu_);
  issue_guess_copies();
  return view_of(acquire_slot(moe_layer, expert), moe_layer);
}

int TieredExpertProvider::acquire_slot(int moe_layer, int expert) {
  const int key = key_checked(moe_layer, expert, "acquire");
  int32_t& announced = announced_slot_[static_cast<size_t>(key)];
  int slot = announced;
  if (slot >= 0) {
    announced = -1;
  } else {
    book_.enter_layer(moe_layer);
    slot = pin(moe_layer, expert);
    try {
      start_copies(/*allow_guess=*/false);
    } catch (...) {
      book_.unpin(slot);
      throw;
    }
  }
  try {
    finish_copy(slot);
  } catch (...) {
    book_.unpin(slot);
    throw;
  }
  slots_->use(slot);
  held_slot_[static_cast<size_t>(key)] = slot;
  ++held_count_[static_cast<size_t>(key)];
  return slot;
}

bool TieredExpertProvider::host_capable(int moe_layer, const experts::RoutedOp& op) {
  if (!cpu_misses_ || op.k <= 0) return false;
  int8_t& known = host_capable_[static_cast<size_t>(moe_layer)];
  if (known < 0) {
    const auto& p = parts_[static_cast<size_t>(moe_layer)];
    const auto shape = [](const backend::RecordPart& part) {
      return backend::Weight{part.type, nullptr, part.n_in, part.n_out, part.packing};
    };
    known =
        backend_.computes_host_experts(op.act, shape(p[0]), shape(p[1]), shape(p[2]), op.k, op.gate_up_biases)
            ? 1
            : 0;
    if (known == 0 && notice_ && !refused_noticed_) {
      refused_noticed_ = true;
      notice_(fmt::format(
          "--cpu-misses: the backend cannot compute MoE layer {}'s experts ({}, {}, {}) on the host to its "
          "own bits; its misses are copied up",
          moe_layer, ggml_type_name(p[0].type), ggml_type_name(p[1].type), ggml_type_name(p[2].type)));
    }
  }
  return known == 1;
}

void TieredExpertProvider::release_host_experts() {
  for (const ExpertHandle& h : host_pins_) {
    ram_.release(h);
    --ram_pins_;
  }
  host_pins_.clear();
  host_experts_.clear();
}

std::optional<backend::RoutedExperts> TieredExpertProvider::routed_slots(int moe_layer,
                                                                         std::span<const int32_t> used,
                                                                         const experts::RoutedOp& op) {
  // Every expert pinned in the tier at once: a tier smaller than the layer's union takes the grouped path.
  if (used.size() > slots() || used.size() > ram_.slots()) return std::nullopt;
  const size_t E = static_cast<size_t>(n_expert_);
  const bool host_ok = host_capable(moe_layer, op);
  const auto& p = parts_[static_cast<size_t>(moe_layer)];
  {
    std::lock_guard lock(mu_);
    release_host_experts();
    // Which experts the device tier serves: all of them, or (--cpu-misses) those it holds or is bringing,
    // and miss_copies of the others less the guesses already copied up for this layer.
    device_ids_.clear();
    int copies_left = 0;
    if (host_ok) {
      int32_t& guessed = guess_copies_[static_cast<size_t>(moe_layer)];
      copies_left = std::max(0, miss_copies_ - guessed);
      guessed = 0;
    }
    for (int32_t e : used) {
      const int key = key_checked(moe_layer, e, "routed_slots");
      if (!host_ok || book_.slot_of(key) >= 0 || copies_left-- > 0)
        device_ids_.push_back(e);
      else
        host_experts_.push_back(backend::HostExpert{e, {}, {}, {}});
    }
    // This layer's copies first, then the guesses' (prefetch deferred them): the copy stream is in order.
    announce(moe_layer, device_ids_);
    size_t done = 0;
    try {
      for (; done < device_ids_.size(); ++done) (void)acquire_slot(moe_layer, device_ids_[done]);
      issue_guess_copies();
      // The host experts' records: pinned in RAM (a RAM miss queues its disk read), then waited for.
      for (const backend::HostExpert& h : host_experts_) {
        make_ram_room();
        host_pins_.push_back(ram_.acquire(moe_layer, h.expert));
        ++ram_pins_;
      }
      for (size_t i = 0; i < host_experts_.size(); ++i) {
        const uint8_t* record = ram_.wait(host_pins_[i]);
        const auto matrix = [record](const backend::RecordPart& part) {
          return backend::Weight{part.type, record + part.offset, part.n_in, part.n_out, part.packing};
        };
        host_experts_[i].gate = matrix(p[0]);
        host_experts_[i].up = matrix(p[1]);
        host_experts_[i].down = matrix(p[2]);
      }
    } catch (...) {
      for (size_t i = 0; i < done; ++i) release_locked(moe_layer, device_ids_[i]);
      release_host_experts();
      throw;
    }
    telemetry_.layer(moe_layer).host_computed += host_experts_.size();
    std::fill(slot_map_host_.begin(), slot_map_host_.end(), 0);
    for (int32_t e : device_ids_)
      slot_map_host_[static_cast<size_t>(e)] =
          held_slot_[static_cast<size_t>(key_checked(moe_layer, e, "routed_slots"))];
    for (const backend::HostExpert& h : host_experts_) slot_map_host_[static_cast<size_t>(h.expert)] = -1;
  }
  const auto row = slot_map_.as<int32_t>().sub(static_cast<size_t>(moe_layer) * E, E);
  backend_.upload(row, slot_map_host_.data(), E);
  const auto stack = [&](const backend::RecordPart& part) {
    backend::ExpertStack s;
    s.first = backend::Weight{part.type, slots_->part(0, part.offset), part.n_in, part.n_out,
                              backend_.preferred_packing(part.type, part.n_out)};
    s.stride = slots_->slot_bytes();
    return s;
  };
  backend::RoutedExperts ex;
  ex.gate = stack(p[0]);
  ex.up = stack(p[1]);
  ex.down = stack(p[2]);
  ex.n_expert = n_expert_;
  ex.slot_of = backend::Buf<const int32_t>(row);
  ex.host = host_experts_;
  return ex;
}

void TieredExpertProvider::release_routed(int moe_layer, std::span<const int32_t> used) {
  std::lock_guard lock(mu_);
  for (int32_t e : device_ids_)
    if (std::find(used.begin(), used.end(), e) != used.end()) release_locked(moe_layer, e);
  device_ids_.clear();
  release_host_experts();
}

void TieredExpertProvider::release(int moe_layer, int expert) {
  std::lock_guard lock(mu_);
  release_locked(moe_layer, expert);
}

void TieredExpertProvider::release_locked(int moe_layer, int expert) {
  const int key = key_checked(moe_layer, expert, "release");
  int32_t& count = held_count_[static_cast<size_t>(key)];
  if (count <= 0) fail("expert provider release: MoE layer {} expert {} is not acquired", moe_layer, expert);
  --count;
  const int slot = held_slot_[static_cast<size_t>(key)];
  slots_->retire(slot);
  book_.unpin(slot);
}

void TieredExpertProvider::release_spare() {
  std::lock_guard lock(mu_);
  release_unclaimed();
  finish_every_copy();
}

void TieredExpertProvider::abandon() {
  std::lock_guard lock(mu_);
  for (size_t s = 0; s < copy_pending_.size(); ++s) {
    if (!copy_pending_[s]) continue;
    copy_pending_[s] = 0;
    book_.finish_read(static_cast<int>(s), false);
  }
  try {
    for (size_t s = 0; s < host_reading_.size(); ++s)
      if (host_reading_[s]) slots_->wait_host_done(static_cast<int>(s));
  } catch (...) {
    // The device failed: nothing more can be waited for; the pins go anyway.
  }
  std::fill(host_reading_.begin(), host_reading_.end(), 0);
  std::fill(ram_pin_.begin(), ram_pin_.end(), ExpertHandle{});
  ram_pins_ = 0;
  host_pins_.clear();
  host_experts_.clear();
  device_ids_.clear();
  ram_.unpin_all();
  book_.unpin_all();
  std::fill(announced_slot_.begin(), announced_slot_.end(), -1);
  std::fill(held_count_.begin(), held_count_.end(), 0);
  announced_keys_.clear();
}

bool TieredExpertProvider::resident(int moe_layer, int expert) const {
  const int key = key_checked(moe_layer, expert, "resident");
  std::lock_guard lock(mu_);
  const int s = book_.slot_of(key);
  return s >= 0 && book_.state(s) == CacheBook::State::kReady;
}

std::string TieredExpertProvider::describe() const {
  return fmt::format("{}, {}", slots_->describe(), book_.policy_name());
}

TelemetrySnapshot TieredExpertProvider::telemetry() const {
  std::lock_guard lock(mu_);
  return telemetry_.snapshot();
}

void TieredExpertProvider::reset_telemetry() {
  std::lock_guard lock(mu_);
  telemetry_.reset();
}

void TieredExpertProvider::record_step(uint64_t tokens, uint64_t step_ns) {
  std::lock_guard lock(mu_);
  telemetry_.add_step(tokens, step_ns);
}

}  // namespace df::stream

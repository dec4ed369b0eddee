#include "stream/expert_cache.h"

#include <xxhash.h>

#include <chrono>
#include <cstring>

#include "stream/byte_size.h"
#include "stream/experts_file.h"
#include "stream/slot_pool.h"
#include "util/error.h"

namespace df::stream {
namespace {

uint64_t steady_now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

constexpr int kRetry = -2;  // demand_victim() waited for a read: the caller looks the key up again

}  // namespace

ExpertCache::ExpertCache(RecordSource source, const ExpertCacheOptions& options)
    : source_(std::move(source)),
      options_(options),
      lists_(1, kListCount),
      telemetry_(source_.layout.n_moe_layers > 0 ? source_.layout.n_moe_layers : 0) {
  source_.validate();
  if (!options_.notice) options_.notice = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  const store::Layout& layout = source_.layout;
  const uint64_t n_records =
      static_cast<uint64_t>(layout.n_moe_layers) * static_cast<uint64_t>(layout.n_expert);
  n_slots_ = std::min<uint64_t>(options_.slots, n_records);
  if (n_slots_ < options_.min_slots || n_slots_ == 0)
    fail(
        "expert cache: {} slots of {} cannot hold the {} experts one layer needs at once; the minimum budget "
        "is {}",
        n_slots_, format_bytes(layout.record_bytes), options_.min_slots,
        format_bytes(options_.min_slots * layout.record_bytes));

  file_ = std::make_unique<ExpertsFile>(source_.experts_path, options_.io, n_records * layout.record_bytes,
                                        layout.record_bytes, layout.n_expert, options_.notice,
                                        options_.faults.refuse_direct);
  pool_ = std::make_unique<SlotPool>(n_slots_, layout.record_bytes);

  const int n = static_cast<int>(n_slots_);
  map_.assign(n_records, -1);
  slots_.resize(n_slots_);
  lists_ = SlotLists(n, kListCount);
  for (int s = 0; s < n; ++s) lists_.push_back(kFree, s);
  policy_ = make_policy(options_.policy, n, static_cast<int>(n_records), options_.policy_options);
  layer_done_epoch_.assign(static_cast<size_t>(layout.n_moe_layers), 0);

  BackendSetup setup;
  setup.fd = file_->fd();
  setup.direct = file_->direct();
  setup.pool = pool_->base();
  setup.slot_bytes = layout.record_bytes;
  setup.n_slots = n;
  setup.queue_depth = options_.queue_depth;
  setup.threads = options_.pread_threads;
  setup.register_buffers = options_.register_buffers;
  setup.faults = &options_.faults;
  setup.notice = options_.notice;
  if (options_.reader != ReaderKind::kPread) backend_ = make_uring_backend(*this, setup);
  if (!backend_) backend_ = make_pread_backend(*this, setup);
}

ExpertCache::~ExpertCache() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  backend_.reset();  // returns once every read in flight has landed, before the pool goes away
}

uint64_t ExpertCache::pool_bytes() const { return pool_->bytes(); }

uint64_t ExpertCache::overhead_bytes() const {
  return map_.capacity() * sizeof(int32_t) + slots_.capacity() * sizeof(Slot) + lists_.memory_bytes() +
         policy_->memory_bytes() + layer_done_epoch_.capacity() * sizeof(uint64_t) +
         static_cast<uint64_t>(source_.layout.n_moe_layers) * sizeof(LayerCounters) +
         source_.checksums.capacity() * sizeof(uint64_t);
}

std::string ExpertCache::describe() const {
  return fmt::format("{} slots x {} = {}, {}, {}, {}", n_slots_, format_bytes(record_bytes()),
                     format_bytes(pool_bytes()), policy_->name(), backend_->describe(),
                     file_->direct() ? "O_DIRECT" : "page cache");
}

uint64_t ExpertCache::clock_now() const { return options_.clock_ns ? options_.clock_ns() : steady_now_ns(); }

const char* ExpertCache::policy_name() const { return policy_->name(); }
bool ExpertCache::direct_io() const { return file_->direct(); }
const char* ExpertCache::reader_name() const { return backend_->name(); }

void ExpertCache::check_ids(int layer, std::span<const int32_t> ids, const char* what) const {
  const store::Layout& l = source_.layout;
  if (layer < 0 || layer >= l.n_moe_layers)
    fail("expert cache {}: MoE layer {} out of range ({} MoE layers)", what, layer, l.n_moe_layers);
  for (int32_t id : ids)
    if (id < 0 || id >= l.n_expert)
      fail("expert cache {}: expert {} out of range (MoE layer {} has {} experts)", what, id, layer,
           l.n_expert);
}

bool ExpertCache::stale(const Slot& s) const {
  const int layer = s.key / source_.layout.n_expert;
  return layer_done_epoch_[static_cast<size_t>(layer)] > s.guess_epoch;
}

// Demand moved on from current_layer_: its guesses that were not used are wrong, so they become the first
// victims, and the ones not yet read are withdrawn.
void ExpertCache::enter_layer(int layer) {
  if (layer == current_layer_) return;
  const int left = current_layer_;
  current_layer_ = layer;
  if (left < 0) return;
  layer_done_epoch_[static_cast<size_t>(left)] = ++epoch_;
  const int n_expert = source_.layout.n_expert;
  for (int s = lists_.front(kPendingGuesses); s != SlotLists::kNone;) {
    const int next = lists_.next(s);
    if (slots_[static_cast<size_t>(s)].key / n_expert == left) lists_.push_back(kStaleGuesses, s);
    s = next;
  }
  for (int s = lists_.front(kGuessQueue); s != SlotLists::kNone;) {
    const int next = lists_.next(s);
    if (slots_[static_cast<size_t>(s)].key / n_expert == left) {
      evict(s);
      lists_.push_back(kFree, s);
      ++telemetry_.layer(left).prefetch_cancelled;
    }
    s = next;
  }
}

void ExpertCache::evict(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.key >= 0) map_[static_cast<size_t>(s.key)] = -1;
  policy_->remove_candidate(slot);
  lists_.remove(slot);
  s.key = -1;
  s.state = State::kEmpty;
  s.guessed = false;
  s.error.clear();
}

void ExpertCache::assign(int slot, int key, bool guess) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  s.key = key;
  s.state = State::kQueued;
  s.guessed = guess;
  s.guess_epoch = epoch_;
  map_[static_cast<size_t>(key)] = slot;
  lists_.push_back(guess ? kGuessQueue : kDemandQueue, slot);
}

// A guess for a layer still ahead is likely to be used within the millisecond, unlike the policy's victim, so
// it goes only after the policy has nothing left; a guess whose layer passed unused goes before anything
// else.
int ExpertCache::demand_victim(std::unique_lock<std::mutex>& lock, int layer) {
  for (const List list : {kFree, kStaleGuesses}) {
    if (lists_.empty(list)) continue;
    const int s = lists_.pop_front(list);
    evict(s);
    return s;
  }
  if (const int s = policy_->victim(); s != EvictionPolicy::kNone) {
    evict(s);
    return s;
  }
  if (!lists_.empty(kPendingGuesses)) {
    const int s = lists_.pop_front(kPendingGuesses);
    evict(s);
    return s;
  }
  if (!lists_.empty(kGuessQueue)) {
    const int s = lists_.front(kGuessQueue);
    ++telemetry_.layer(slots_[static_cast<size_t>(s)].key / source_.layout.n_expert).prefetch_cancelled;
    evict(s);
    return s;
  }
  // Only slots being read can still make room: a guess nobody pinned, once it lands, becomes a victim.
  for (const Slot& s : slots_) {
    if (s.state == State::kReading && s.pins == 0) {
      const uint64_t t0 = clock_now();
      done_cv_.wait(lock);
      telemetry_.layer(layer).wait_ns += clock_now() - t0;
      return kRetry;
    }
  }
  fail(
      "expert cache: no slot for an expert of MoE layer {}: all {} slots ({}) are pinned by the experts in "
      "use; "
      "the budget is below what one step needs at once: raise --expert-cache",
      layer, n_slots_, format_bytes(pool_bytes()));
}

namespace {

// Guesses for `target` made while demand is at `current` must not evict experts of the layers in between (nor
// of `target` itself): those are needed before the guess. LRU would offer exactly them, as the records of the
// next layer were used longest ago of all in a decode step. How far the policy looks for another victim:
constexpr int kGuessVictimScan = 64;

}  // namespace

int ExpertCache::guess_victim(int layer) {
  for (const List list : {kFree, kStaleGuesses}) {
    if (lists_.empty(list)) continue;
    const int s = lists_.pop_front(list);
    evict(s);
    return s;
  }
  struct Ctx {
    const ExpertCache* cache;
    int current, span, n_layers;
  };
  const int n_layers = source_.layout.n_moe_layers;
  const Ctx ctx{this, current_layer_, current_layer_ < 0 ? 0 : (layer - current_layer_ + n_layers) % n_layers,
                n_layers};
  const SlotFilter allowed{&ctx, [](const void* p, int slot) {
                             const Ctx& c = *static_cast<const Ctx*>(p);
                             const int l = c.cache->slots_[static_cast<size_t>(slot)].key /
                                           c.cache->source_.layout.n_expert;
                             const int ahead = (l - c.current + c.n_layers) % c.n_layers;
                             return ahead == 0 || ahead > c.span;
                           }};
  if (const int s = policy_->victim_if(allowed, kGuessVictimScan); s != EvictionPolicy::kNone) {
    evict(s);
    return s;
  }
  return -1;
}

ExpertHandle ExpertCache::pin_one(std::unique_lock<std::mutex>& lock, int layer, int expert) {
  const int key = key_of(layer, expert);
  LayerCounters& c = telemetry_.layer(layer);
  while (true) {
    int s = map_[static_cast<size_t>(key)];
    if (s >= 0 && slots_[static_cast<size_t>(s)].state == State::kFailed &&
        slots_[static_cast<size_t>(s)].pins == 0) {
      evict(s);  // a read that failed earlier is tried again
      lists_.push_back(kFree, s);
      s = -1;
    }
    if (s >= 0) {
      Slot& slot = slots_[static_cast<size_t>(s)];
      ++c.accesses;
      ++c.hits;
      if (slot.guessed) {
        slot.guessed = false;
        ++c.prefetch_hits;
        if (lists_.owner(s) == kGuessQueue)
          lists_.push_back(kDemandQueue, s);  // jumps ahead of the guesses
        else
          lists_.remove(s);
      }
      if (slot.pins++ == 0) policy_->remove_candidate(s);
      policy_->on_demand(key);
      return ExpertHandle{s, layer, expert};
    }
    const int victim = demand_victim(lock, layer);
    if (victim == kRetry) continue;
    ++c.accesses;
    ++c.misses;
    assign(victim, key, /*guess=*/false);
    slots_[static_cast<size_t>(victim)].pins = 1;
    policy_->on_demand(key);
    return ExpertHandle{victim, layer, expert};
  }
}

void ExpertCache::acquire(int layer, std::span<const int32_t> ids, std::span<ExpertHandle> out) {
  if (out.size() < ids.size())
    fail("expert cache acquire: {} ids but room for {} handles", ids.size(), out.size());
  check_ids(layer, ids, "acquire");
  bool queued = false;
  {
    std::unique_lock lock(mu_);
    enter_layer(layer);
    size_t done = 0;
    try {
      for (; done < ids.size(); ++done) out[done] = pin_one(lock, layer, ids[done]);
    } catch (...) {
      for (size_t i = 0; i < done; ++i) unpin(out[i].slot);
      throw;
    }
    queued = !lists_.empty(kDemandQueue);
  }
  if (queued) wake_reader();
}

ExpertHandle ExpertCache::acquire(int layer, int expert) {
  const int32_t id = expert;
  ExpertHandle h;
  acquire(layer, std::span<const int32_t>(&id, 1), std::span<ExpertHandle>(&h, 1));
  return h;
}

void ExpertCache::prefetch(int layer, std::span<const int32_t> ids) {
  check_ids(layer, ids, "prefetch");
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    LayerCounters& c = telemetry_.layer(layer);
    ++c.prefetch_rounds;
    for (int32_t id : ids) {
      const int key = key_of(layer, id);
      const int s = map_[static_cast<size_t>(key)];
      if (s >= 0) {
        Slot& slot = slots_[static_cast<size_t>(s)];
        if (slot.guessed) {  // guessed again: no longer a leftover of an older round
          slot.guess_epoch = epoch_;
          if (lists_.owner(s) == kStaleGuesses) lists_.push_back(kPendingGuesses, s);
        }
        continue;
      }
      const int victim = guess_victim(layer);
      if (victim < 0) {
        ++c.prefetch_dropped;
        continue;
      }
      assign(victim, key, /*guess=*/true);
      ++c.prefetch_issued;
      queued = true;
    }
  }
  if (queued) wake_reader();
}

const uint8_t* ExpertCache::wait(const ExpertHandle& h) {
  std::unique_lock lock(mu_);
  if (h.slot < 0 || static_cast<uint64_t>(h.slot) >= n_slots_ ||
      slots_[static_cast<size_t>(h.slot)].pins <= 0 ||
      slots_[static_cast<size_t>(h.slot)].key != key_of(h.layer, h.expert))
    fail("expert cache wait: MoE layer {} expert {} is not acquired", h.layer, h.expert);
  Slot& s = slots_[static_cast<size_t>(h.slot)];
  if (s.state == State::kQueued || s.state == State::kReading) {
    const uint64_t t0 = clock_now();
    done_cv_.wait(lock, [&] { return s.state != State::kQueued && s.state != State::kReading; });
    telemetry_.layer(h.layer).wait_ns += clock_now() - t0;
  }
  if (s.state == State::kFailed) throw Error(s.error);
  return pool_->slot(static_cast<uint64_t>(h.slot));
}

bool ExpertCache::ready(const ExpertHandle& h) const {
  std::lock_guard lock(mu_);
  return h.slot >= 0 && static_cast<uint64_t>(h.slot) < n_slots_ &&
         slots_[static_cast<size_t>(h.slot)].state == State::kReady;
}

void ExpertCache::park(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.state == State::kFailed) {
    evict(slot);
    lists_.push_back(kFree, slot);
  } else if (s.guessed) {
    lists_.push_back(stale(s) ? kStaleGuesses : kPendingGuesses, slot);
  } else {
    policy_->add_candidate(slot, s.key);
  }
}

void ExpertCache::unpin(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (--s.pins > 0) return;
  if (s.state == State::kReady || s.state == State::kFailed) park(slot);
  // A read still queued or in flight is parked when it lands.
}

void ExpertCache::release(std::span<const ExpertHandle> handles) {
  std::lock_guard lock(mu_);
  for (const ExpertHandle& h : handles) {
    if (h.slot < 0 || static_cast<uint64_t>(h.slot) >= n_slots_ ||
        slots_[static_cast<size_t>(h.slot)].pins <= 0 ||
        slots_[static_cast<size_t>(h.slot)].key != key_of(h.layer, h.expert))
      fail("expert cache release: MoE layer {} expert {} is not acquired", h.layer, h.expert);
    unpin(h.slot);
  }
}

void ExpertCache::release(const ExpertHandle& h) { release(std::span<const ExpertHandle>(&h, 1)); }

void ExpertCache::unpin_all() {
  std::lock_guard lock(mu_);
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].pins <= 0) continue;
    slots_[s].pins = 1;
    unpin(static_cast<int>(s));
  }
}

void ExpertCache::drain() {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock,
                [&] { return lists_.empty(kDemandQueue) && lists_.empty(kGuessQueue) && in_flight_ == 0; });
}

bool ExpertCache::resident(int layer, int expert) const {
  check_ids(layer, {}, "resident");
  std::lock_guard lock(mu_);
  if (expert < 0 || expert >= source_.layout.n_expert) return false;
  const int s = map_[static_cast<size_t>(key_of(layer, expert))];
  return s >= 0 && slots_[static_cast<size_t>(s)].state == State::kReady;
}

TelemetrySnapshot ExpertCache::telemetry() const {
  std::lock_guard lock(mu_);
  return telemetry_.snapshot();
}

void ExpertCache::reset_telemetry() {
  std::lock_guard lock(mu_);
  telemetry_.reset();
}

void ExpertCache::record_step(uint64_t tokens, uint64_t step_ns) {
  std::lock_guard lock(mu_);
  telemetry_.add_step(tokens, step_ns);
}

void ExpertCache::wake_reader() {
  work_cv_.notify_all();
  backend_->wake();
}

bool ExpertCache::next_read(ReadJob& job, bool block, bool allow_guess) {
  std::unique_lock lock(mu_);
  while (true) {
    if (stopping_) return false;
    int s = lists_.pop_front(kDemandQueue);
    const bool guess = s == SlotLists::kNone && allow_guess;
    if (guess) s = lists_.pop_front(kGuessQueue);
    if (s != SlotLists::kNone) {
      Slot& slot = slots_[static_cast<size_t>(s)];
      const uint64_t now = clock_now();
      slot.state = State::kReading;
      slot.read_start_ns = now;
      if (in_flight_++ == 0) busy_since_ns_ = now;
      const int n_expert = source_.layout.n_expert;
      job.slot = s;
      job.layer = slot.key / n_expert;
      job.expert = slot.key % n_expert;
      job.guess = guess;
      job.serial = reads_started_++;
      job.file_offset = source_.layout.record_offset(job.layer, job.expert);
      job.bytes = source_.layout.record_bytes;
      job.dest = pool_->slot(static_cast<uint64_t>(s));
      return true;
    }
    if (!block) return false;
    work_cv_.wait(lock);
  }
}

std::string ExpertCache::read_error(const ReadJob& job, const ReadResult& r) const {
  const std::string where = fmt::format("{}: MoE layer {} expert {} (bytes {}..{})", source_.experts_path,
                                        job.layer, job.expert, job.file_offset, job.file_offset + job.bytes);
  if (r.error != 0) return fmt::format("{}: read failed: {}", where, std::strerror(r.error));
  return fmt::format("{}: the file ends at byte {}; the store is truncated: re-run diskformer ingest", where,
                     job.file_offset + r.bytes_done);
}

void ExpertCache::read_done(const ReadJob& job, const ReadResult& result) {
  // Verified outside the lock: nobody else touches a slot that is being read.
  std::string error;
  if (result.error != 0 || result.bytes_done < job.bytes) {
    error = read_error(job, result);
  } else {
    const uint64_t expected = source_.checksums[static_cast<size_t>(key_of(job.layer, job.expert))];
    const uint64_t got = XXH3_64bits(job.dest, job.bytes);
    if (got != expected)
      error = fmt::format(
          "{}: MoE layer {} expert {} (bytes {}..{}): checksum mismatch (xxh3-64 {:016x}, the manifest says "
          "{:016x}); the store is damaged: re-run diskformer ingest",
          source_.experts_path, job.layer, job.expert, job.file_offset, job.file_offset + job.bytes, got,
          expected);
  }
  {
    std::lock_guard lock(mu_);
    Slot& s = slots_[static_cast<size_t>(job.slot)];
    LayerCounters& c = telemetry_.layer(job.layer);
    const uint64_t now = clock_now();
    ++c.reads;
    c.bytes_read += result.bytes_done;
    c.read_ns += now - s.read_start_ns;
    if (--in_flight_ == 0) telemetry_.add_busy(now - busy_since_ns_);
    if (error.empty()) {
      s.state = State::kReady;
    } else {
      s.state = State::kFailed;
      s.error = std::move(error);
      ++c.read_failures;
    }
    if (s.pins == 0) park(job.slot);
  }
  done_cv_.notify_all();
}

}  // namespace df::stream

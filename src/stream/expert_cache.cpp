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

}  // namespace

ExpertCache::ExpertCache(RecordSource source, const ExpertCacheOptions& options)
    : source_(std::move(source)),
      options_(options),
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
  CacheBookOptions bo;
  bo.n_layers = layout.n_moe_layers;
  bo.n_expert = layout.n_expert;
  bo.n_slots = n_slots_;
  bo.record_bytes = layout.record_bytes;
  bo.policy = options_.policy;
  bo.policy_options = options_.policy_options;
  if (bo.policy_options.top_k == 0) bo.policy_options.top_k = static_cast<int>(options_.min_slots);
  book_ = std::make_unique<CacheBook>(bo, telemetry_);
  read_start_ns_.assign(n_slots_, 0);
  read_error_.resize(n_slots_);

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
uint8_t* ExpertCache::pool_data() const { return pool_->base(); }

uint64_t ExpertCache::overhead_bytes() const {
  return book_->memory_bytes() + read_start_ns_.capacity() * sizeof(uint64_t) +
         read_error_.capacity() * sizeof(std::string) +
         static_cast<uint64_t>(source_.layout.n_moe_layers) * sizeof(LayerCounters) +
         source_.checksums.capacity() * sizeof(uint64_t);
}

std::string ExpertCache::describe() const {
  return fmt::format("{} slots x {} = {}, {}, {}, {}", n_slots_, format_bytes(record_bytes()),
                     format_bytes(pool_bytes()), book_->policy_name(), backend_->describe(),
                     file_->direct() ? "O_DIRECT" : "page cache");
}

uint64_t ExpertCache::clock_now() const { return options_.clock_ns ? options_.clock_ns() : steady_now_ns(); }

const char* ExpertCache::policy_name() const { return book_->policy_name(); }
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

ExpertHandle ExpertCache::pin_one(std::unique_lock<std::mutex>& lock, int layer, int expert) {
  while (true) {
    const int s = book_->pin(layer, expert);
    if (s != CacheBook::kWaitForRead) return ExpertHandle{s, layer, expert};
    const uint64_t t0 = clock_now();
    done_cv_.wait(lock);
    telemetry_.layer(layer).wait_ns += clock_now() - t0;
  }
}

bool ExpertCache::acquired(const ExpertHandle& h) const {
  return h.slot >= 0 && static_cast<uint64_t>(h.slot) < n_slots_ && book_->pins(h.slot) > 0 &&
         book_->key(h.slot) == key_of(h.layer, h.expert);
}

void ExpertCache::acquire(int layer, std::span<const int32_t> ids, std::span<ExpertHandle> out) {
  if (out.size() < ids.size())
    fail("expert cache acquire: {} ids but room for {} handles", ids.size(), out.size());
  check_ids(layer, ids, "acquire");
  bool queued = false;
  {
    std::unique_lock lock(mu_);
    book_->enter_layer(layer);
    size_t done = 0;
    try {
      for (; done < ids.size(); ++done) out[done] = pin_one(lock, layer, ids[done]);
    } catch (...) {
      for (size_t i = 0; i < done; ++i) book_->unpin(out[i].slot);
      throw;
    }
    queued = book_->demand_queued();
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
    queued = book_->prefetch(layer, ids);
  }
  if (queued) wake_reader();
}

const uint8_t* ExpertCache::wait(const ExpertHandle& h) {
  using State = CacheBook::State;
  std::unique_lock lock(mu_);
  if (!acquired(h)) fail("expert cache wait: MoE layer {} expert {} is not acquired", h.layer, h.expert);
  const auto in_flight = [&] {
    const State st = book_->state(h.slot);
    return st == State::kQueued || st == State::kReading;
  };
  if (in_flight()) {
    const uint64_t t0 = clock_now();
    done_cv_.wait(lock, [&] { return !in_flight(); });
    telemetry_.layer(h.layer).wait_ns += clock_now() - t0;
  }
  if (book_->state(h.slot) == State::kFailed) throw Error(read_error_[static_cast<size_t>(h.slot)]);
  return pool_->slot(static_cast<uint64_t>(h.slot));
}

bool ExpertCache::ready(const ExpertHandle& h) const {
  std::lock_guard lock(mu_);
  return h.slot >= 0 && static_cast<uint64_t>(h.slot) < n_slots_ &&
         book_->state(h.slot) == CacheBook::State::kReady;
}

void ExpertCache::release(std::span<const ExpertHandle> handles) {
  std::lock_guard lock(mu_);
  for (const ExpertHandle& h : handles) {
    if (!acquired(h)) fail("expert cache release: MoE layer {} expert {} is not acquired", h.layer, h.expert);
    book_->unpin(h.slot);
  }
}

void ExpertCache::release(const ExpertHandle& h) { release(std::span<const ExpertHandle>(&h, 1)); }

void ExpertCache::unpin_all() {
  std::lock_guard lock(mu_);
  book_->unpin_all();
}

void ExpertCache::drain() {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return !book_->reads_queued() && in_flight_ == 0; });
}

bool ExpertCache::resident(int layer, int expert) const {
  check_ids(layer, {}, "resident");
  std::lock_guard lock(mu_);
  if (expert < 0 || expert >= source_.layout.n_expert) return false;
  const int s = book_->slot_of(key_of(layer, expert));
  return s >= 0 && book_->state(s) == CacheBook::State::kReady;
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
    bool guess = false;
    const int s = book_->start_read(allow_guess, &guess);
    if (s >= 0) {
      const uint64_t now = clock_now();
      read_start_ns_[static_cast<size_t>(s)] = now;
      if (in_flight_++ == 0) busy_since_ns_ = now;
      const int n_expert = source_.layout.n_expert;
      job.slot = s;
      job.layer = book_->key(s) / n_expert;
      job.expert = book_->key(s) % n_expert;
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
    LayerCounters& c = telemetry_.layer(job.layer);
    const uint64_t now = clock_now();
    ++c.reads;
    c.bytes_read += result.bytes_done;
    c.read_ns += now - read_start_ns_[static_cast<size_t>(job.slot)];
    if (--in_flight_ == 0) telemetry_.add_busy(now - busy_since_ns_);
    const bool ok = error.empty();
    if (!ok) {
      read_error_[static_cast<size_t>(job.slot)] = std::move(error);
      ++c.read_failures;
    }
    book_->finish_read(job.slot, ok);
  }
  done_cv_.notify_all();
}

}  // namespace df::stream

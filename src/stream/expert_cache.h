#pragma once
// The budgeted expert cache (DESIGN.md "The expert cache"): N slots of one record each, allocated once,
// filled from experts.bin by a reader backend and verified against the store's checksums before anyone sees
// them.
//
//   acquire(layer, ids)  pins the slots of this step; misses queue demand reads ahead of any queued guess
//   wait(handle)         blocks until that one record is ready, so compute on the first resident expert
//   starts
//                        while the others still arrive; a failed or corrupt read throws df::Error here
//   release(handles)     unpins; the policy may now evict them
//   prefetch(layer, ids) guesses of a later layer, read at low priority into free slots, wrong guesses or the
//                        policy's victims; never evicts a pinned slot, never blocks, drops what finds no slot
//
// Which slot to give up is CacheBook's business (stream/cache_book.h), shared with `diskformer replay`.
// Nothing allocates on this path: the map, queues and lists are fixed-size arrays sized at construction. All
// methods are thread-safe; the reader runs on its own thread(s).
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "stream/cache_book.h"
#include "stream/cache_telemetry.h"
#include "stream/eviction_policy.h"
#include "stream/read_backend.h"
#include "stream/record_source.h"

namespace df::stream {

class ExpertsFile;
class SlotPool;

struct ExpertCacheOptions {
  uint64_t slots = 0;      // BudgetChoice::slots (more than the store has records is trimmed)
  uint64_t min_slots = 1;  // the top-k of one layer: fewer slots is an error
  PolicyKind policy = PolicyKind::kLru;
  PolicyOptions policy_options;
  IoMode io = IoMode::kDirect;
  ReaderKind reader = ReaderKind::kAuto;  // auto: io_uring, else a pread thread pool
  int queue_depth = 16;                   // io_uring reads in flight (at most half of them guesses)
  int pread_threads = 4;
  bool register_buffers = true;
  FaultPlan faults;                                // tests only
  std::function<uint64_t()> clock_ns;              // tests only: the telemetry's clock (default: steady)
  std::function<void(const std::string&)> notice;  // one-line notices (fallbacks); unset: stderr
};

struct ExpertHandle {
  int32_t slot = -1;
  int32_t layer = -1;
  int32_t expert = -1;
};

class ExpertCache final : private ReadSink {
 public:
  ExpertCache(RecordSource source, const ExpertCacheOptions& options);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // Pins ids (each acquisition pins once: an id twice is pinned twice) and fills `out` (ids.size() handles).
  // Waits only when every slot that could make room is still being read; throws df::Error for an id out of
  // range or when the unpinned slots cannot hold the misses (the budget is below what is pinned at once),
  // after unpinning what this call had pinned.
  void acquire(int layer, std::span<const int32_t> ids, std::span<ExpertHandle> out);
  ExpertHandle acquire(int layer, int expert);
  // The record's bytes (record_bytes() long) once read and verified; valid until the handle is released.
  const uint8_t* wait(const ExpertHandle& h);
  bool ready(const ExpertHandle& h) const;
  void release(std::span<const ExpertHandle> handles);
  void release(const ExpertHandle& h);
  void prefetch(int layer, std::span<const int32_t> ids);
  // Drops every pin, e.g. after a step failed half way.
  void unpin_all();
  // Blocks until no read is queued or in flight.
  void drain();

  bool resident(int layer, int expert) const;  // read, verified and in memory
  uint64_t slots() const { return n_slots_; }
  uint64_t record_bytes() const { return source_.layout.record_bytes; }
  uint64_t pool_bytes() const;
  uint8_t* pool_data() const;  // the slots' memory (a device backend page-locks it for its copies)
  // Bookkeeping memory beyond the pool (map, slot table, lists, policy), for the peak-RSS statement.
  uint64_t overhead_bytes() const;
  const RecordSource& source() const { return source_; }
  // "455 slots x 4.50 MiB = 2.00 GiB, lru, io_uring depth 16, registered buffers, O_DIRECT".
  std::string describe() const;
  // What actually runs (a request can fall back: O_DIRECT on a file system without it, io_uring where the
  // kernel refuses it), so that callers and tests can tell that their settings took effect.
  const char* policy_name() const;
  bool direct_io() const;
  const char* reader_name() const;  // "io_uring" or "pread"

  TelemetrySnapshot telemetry() const;
  void reset_telemetry();
  // The engine reports each step (tokens and time) so that the telemetry can say bytes per token and wait
  // share.
  void record_step(uint64_t tokens, uint64_t step_ns);

 private:
  bool next_read(ReadJob& job, bool block, bool allow_guess) override;
  void read_done(const ReadJob& job, const ReadResult& result) override;

  int key_of(int layer, int expert) const { return layer * source_.layout.n_expert + expert; }
  void check_ids(int layer, std::span<const int32_t> ids, const char* what) const;
  ExpertHandle pin_one(std::unique_lock<std::mutex>& lock, int layer, int expert);
  bool acquired(const ExpertHandle& h) const;
  std::string read_error(const ReadJob& job, const ReadResult& result) const;
  void wake_reader();
  uint64_t clock_now() const;

  RecordSource source_;
  ExpertCacheOptions options_;
  uint64_t n_slots_ = 0;
  std::unique_ptr<ExpertsFile> file_;
  std::unique_ptr<SlotPool> pool_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // reader threads: a job was queued or the cache shuts down
  std::condition_variable done_cv_;  // waiters: a read finished
  CacheTelemetry telemetry_;
  std::unique_ptr<CacheBook> book_;      // which key is where, pins, read states, the policy
  std::vector<uint64_t> read_start_ns_;  // per slot
  std::vector<std::string> read_error_;  // per slot: why its read failed (CacheBook::State::kFailed)
  uint64_t reads_started_ = 0;
  int in_flight_ = 0;
  uint64_t busy_since_ns_ = 0;
  bool stopping_ = false;

  std::unique_ptr<ReadBackend> backend_;  // last: its threads call back into everything above
};

}  // namespace df::stream

#pragma once
// The reader side of the expert cache: a backend moves whole expert records from experts.bin into slots. The
// cache keeps the queues (demand ahead of guesses) and verifies what arrives; a backend only pulls jobs,
// reads them completely (resubmitting short reads) and reports the outcome.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace df::stream {

enum class IoMode { kDirect, kBuffered };  // --io direct|buffered: O_DIRECT, or trust the page cache
enum class ReaderKind { kAuto, kUring, kPread };

IoMode parse_io_mode(std::string_view text);  // "direct" | "buffered"; df::Error naming --io otherwise

struct ReadJob {
  int32_t slot = -1;
  int32_t layer = -1, expert = -1;
  bool guess = false;
  uint64_t serial = 0;  // the how-many-th read the cache handed out (0-based), for fault injection
  uint64_t file_offset = 0;
  uint64_t bytes = 0;
  uint8_t* dest = nullptr;
};

struct ReadResult {
  int error = 0;            // errno of a failed read, 0 otherwise
  uint64_t bytes_done = 0;  // < job.bytes with error == 0: the file ended there
};

// Test hooks: make a chosen read fail or come back short, and watch the order reads start in.
struct FaultPlan {
  int64_t eio_on_read = -1;    // the read with this serial fails with EIO
  int64_t short_on_read = -1;  // the read with this serial returns only short_bytes on its first attempt
  uint64_t short_bytes = 4096;
  std::function<void(const ReadJob&)> on_read_start;  // called on the reader thread before each read
  bool refuse_direct = false;  // behave as a file system without O_DIRECT (tmpfs before Linux 6.6)

  // The result of one attempt after the planned faults: `res` is what the OS returned (bytes or -errno).
  int64_t apply(const ReadJob& job, int attempt, int64_t res) const {
    if (attempt == 0 && static_cast<int64_t>(job.serial) == eio_on_read) return -5;  // EIO
    if (attempt == 0 && static_cast<int64_t>(job.serial) == short_on_read &&
        res > static_cast<int64_t>(short_bytes))
      return static_cast<int64_t>(short_bytes);
    return res;
  }
};

class ReadSink {
 public:
  // The next job: demand reads first, guesses only when `allow_guess`. With `block`, waits until there is one
  // and returns false only when the cache shuts down; without, returns false at once when there is none.
  virtual bool next_read(ReadJob& job, bool block, bool allow_guess) = 0;
  // Called once per job from the reader thread that finished it.
  virtual void read_done(const ReadJob& job, const ReadResult& result) = 0;

 protected:
  ~ReadSink() = default;
};

class ReadBackend {
 public:
  // Destruction takes no new jobs and returns once every read in flight has finished.
  virtual ~ReadBackend() = default;
  virtual void wake() = 0;  // jobs were queued
  virtual std::string describe() const = 0;
  virtual const char* name() const = 0;  // "io_uring" or "pread"
};

struct BackendSetup {
  int fd = -1;
  bool direct = false;
  uint8_t* pool = nullptr;
  uint64_t slot_bytes = 0;
  int n_slots = 0;
  int queue_depth = 16;
  int threads = 4;
  bool register_buffers = true;
  const FaultPlan* faults = nullptr;
  std::function<void(const std::string&)> notice;
};

// O_DIRECT reads stop short of a block boundary only at the end of the file (and could not continue from an
// unaligned offset anyway), so such a short read means the file ended.
inline bool ends_at_eof(const BackendSetup& setup, uint64_t done, uint64_t wanted) {
  constexpr uint64_t kSmallestBlock = 512;
  return setup.direct && done < wanted && done % kSmallestBlock != 0;
}

// nullptr (after a notice) when io_uring is not available here.
std::unique_ptr<ReadBackend> make_uring_backend(ReadSink& sink, const BackendSetup& setup);
std::unique_ptr<ReadBackend> make_pread_backend(ReadSink& sink, const BackendSetup& setup);

}  // namespace df::stream

// A pool of threads doing blocking pread(2): the fallback where io_uring is missing, and a baseline for it.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <vector>

#include "stream/read_backend.h"
#include "util/error.h"

namespace df::stream {
namespace {

class PreadBackend final : public ReadBackend {
 public:
  PreadBackend(ReadSink& sink, const BackendSetup& setup) : sink_(sink), setup_(setup) {
    const int n = setup.threads > 0 ? setup.threads : 1;
    threads_.reserve(static_cast<size_t>(n));
    // With two or more threads the first one only takes demand reads, so a burst of guesses never delays a
    // demand read by a whole record.
    for (int i = 0; i < n; ++i)
      threads_.emplace_back([this, demand_only = n > 1 && i == 0] { run(demand_only); });
  }
  ~PreadBackend() override {
    for (auto& t : threads_) t.join();  // the cache's shutdown makes next_read return false
  }
  void wake() override {}  // the workers wait on the cache's own condition
  const char* name() const override { return "pread"; }
  std::string describe() const override { return fmt::format("pread x{}", threads_.size()); }

 private:
  void run(bool demand_only) {
    ReadJob job;
    while (sink_.next_read(job, /*block=*/true, /*allow_guess=*/!demand_only))
      sink_.read_done(job, read(job));
  }

  ReadResult read(const ReadJob& job) const {
    if (setup_.faults && setup_.faults->on_read_start) setup_.faults->on_read_start(job);
    ReadResult r;
    for (int attempt = 0; r.bytes_done < job.bytes; ++attempt) {
      const uint64_t left = job.bytes - r.bytes_done;
      int64_t got = ::pread(setup_.fd, job.dest + r.bytes_done, left,
                            static_cast<off_t>(job.file_offset + r.bytes_done));
      if (got < 0) got = -errno;
      if (setup_.faults) got = setup_.faults->apply(job, attempt, got);
      if (got == -EINTR || got == -EAGAIN) continue;
      if (got < 0) {
        r.error = static_cast<int>(-got);
        break;
      }
      if (got == 0) break;  // end of file: the caller sees bytes_done < bytes
      r.bytes_done += static_cast<uint64_t>(got);
      if (ends_at_eof(setup_, r.bytes_done, job.bytes)) break;
    }
    return r;
  }

  ReadSink& sink_;
  BackendSetup setup_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<ReadBackend> make_pread_backend(ReadSink& sink, const BackendSetup& setup) {
  return std::make_unique<PreadBackend>(sink, setup);
}

IoMode parse_io_mode(std::string_view text) {
  if (text == "direct") return IoMode::kDirect;
  if (text == "buffered") return IoMode::kBuffered;
  fail("--io: '{}' is not an I/O mode; use direct or buffered", text);
}

}  // namespace df::stream

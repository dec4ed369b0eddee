// io_uring reads: up to queue_depth records in flight from one thread, into registered slot buffers where the
// kernel allows it. New jobs arrive through an eventfd whose read is always armed in the ring, so the thread
// blocks in one place (waiting for completions) whether it is idle or busy.
#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "stream/byte_size.h"
#include "stream/read_backend.h"
#include "util/error.h"

namespace df::stream {
namespace {

constexpr uint64_t kWakeTag = ~uint64_t{0};
// The kernel refuses a registered buffer larger than 1 GiB, so the pool is registered in groups of slots.
constexpr uint64_t kMaxRegisteredBuffer = uint64_t{1} << 30;
constexpr int kMaxRegisteredBuffers = 16384;

class UringBackend final : public ReadBackend {
 public:
  UringBackend(ReadSink& sink, const BackendSetup& setup) : sink_(sink), setup_(setup) {
    depth_ = std::max(setup.queue_depth, 1);
    max_guesses_ = std::max(depth_ / 2, 1);  // the rest of the queue stays open for demand reads
    ops_.resize(static_cast<size_t>(depth_));
    free_ops_.reserve(static_cast<size_t>(depth_));
    for (int i = depth_ - 1; i >= 0; --i) free_ops_.push_back(i);
  }

  // Sets up the eventfd and the ring; an empty string on success, else why io_uring cannot be used.
  std::string init() {
    event_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (event_fd_ < 0) return fmt::format("eventfd: {}", std::strerror(errno));
    const int rc =
        io_uring_queue_init(static_cast<unsigned>(depth_ + 1), &ring_, 0);  // every op + the wake read
    if (rc < 0) return fmt::format("io_uring_queue_init: {}", std::strerror(-rc));
    ring_ready_ = true;
    if (setup_.register_buffers) register_pool();
    return {};
  }

  void start() {
    thread_ = std::thread([this] { run(); });
  }

  ~UringBackend() override {
    if (thread_.joinable()) {
      stop_.store(true);
      wake();
      thread_.join();
    }
    if (ring_ready_) io_uring_queue_exit(&ring_);
    if (event_fd_ >= 0) ::close(event_fd_);
  }

  void wake() override {
    const uint64_t one = 1;
    // A full eventfd counter still wakes the thread; nothing else can fail here.
    [[maybe_unused]] const ssize_t n = ::write(event_fd_, &one, sizeof one);
  }

  const char* name() const override { return "io_uring"; }
  std::string describe() const override {
    return fmt::format("io_uring depth {}{}", depth_, slots_per_buffer_ ? ", registered buffers" : "");
  }

 private:
  struct Op {
    ReadJob job;
    uint64_t done = 0;
    int attempt = 0;
  };

  void register_pool() {
    const uint64_t per = std::max<uint64_t>(1, kMaxRegisteredBuffer / setup_.slot_bytes);
    const uint64_t n_slots = static_cast<uint64_t>(setup_.n_slots);
    const uint64_t groups = (n_slots + per - 1) / per;
    if (groups > kMaxRegisteredBuffers) {
      if (setup_.notice)
        setup_.notice(
            fmt::format("io_uring: {} slots of {} are too many to register as fixed buffers; reading "
                        "into unregistered buffers",
                        n_slots, format_bytes(setup_.slot_bytes)));
      return;
    }
    std::vector<iovec> iov(groups);
    for (uint64_t g = 0; g < groups; ++g) {
      const uint64_t first = g * per, count = std::min(per, n_slots - first);
      iov[g].iov_base = setup_.pool + first * setup_.slot_bytes;
      iov[g].iov_len = count * setup_.slot_bytes;
    }
    const int rc = io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(groups));
    if (rc == 0) {
      slots_per_buffer_ = per;
    } else if (setup_.notice) {
      setup_.notice(
          fmt::format("io_uring: cannot register the {} slot pool as fixed buffers ({}); reading into "
                      "unregistered buffers",
                      format_bytes(n_slots * setup_.slot_bytes), std::strerror(-rc)));
    }
  }

  void arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, event_fd_, &wake_count_, sizeof wake_count_, 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  void submit_op(int index) {
    Op& op = ops_[static_cast<size_t>(index)];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // the ring has room for every op plus the wake read
    uint8_t* dest = op.job.dest + op.done;
    const unsigned len = static_cast<unsigned>(op.job.bytes - op.done);
    const uint64_t off = op.job.file_offset + op.done;
    if (slots_per_buffer_) {
      const int buf = static_cast<int>(static_cast<uint64_t>(op.job.slot) / slots_per_buffer_);
      io_uring_prep_read_fixed(sqe, setup_.fd, dest, len, off, buf);
    } else {
      io_uring_prep_read(sqe, setup_.fd, dest, len, off);
    }
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(index));
  }

  void fill() {
    while (!free_ops_.empty()) {
      ReadJob job;
      if (!sink_.next_read(job, /*block=*/false, /*allow_guess=*/guesses_in_flight_ < max_guesses_)) return;
      if (setup_.faults && setup_.faults->on_read_start) setup_.faults->on_read_start(job);
      const int index = free_ops_.back();
      free_ops_.pop_back();
      ops_[static_cast<size_t>(index)] = Op{job, 0, 0};
      if (job.guess) ++guesses_in_flight_;
      submit_op(index);
    }
  }

  void finish(int index, int error) {
    Op& op = ops_[static_cast<size_t>(index)];
    if (op.job.guess) --guesses_in_flight_;
    free_ops_.push_back(index);
    sink_.read_done(op.job, ReadResult{error, op.done});
  }

  void complete(int index, int64_t res) {
    Op& op = ops_[static_cast<size_t>(index)];
    if (setup_.faults) res = setup_.faults->apply(op.job, op.attempt, res);
    ++op.attempt;
    if (res == -EINTR || res == -EAGAIN) return submit_op(index);
    if (res < 0) return finish(index, static_cast<int>(-res));
    if (res == 0) return finish(index, 0);  // end of file before the record ends
    op.done += static_cast<uint64_t>(res);
    if (ends_at_eof(setup_, op.done, op.job.bytes)) return finish(index, 0);
    if (op.done < op.job.bytes) return submit_op(index);  // a short read: ask for the rest
    finish(index, 0);
  }

  void run() {
    arm_wake();
    while (true) {
      if (!stop_.load()) fill();
      io_uring_submit(&ring_);
      if (stop_.load() && in_flight() == 0) return;
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) {
        // The ring itself failed: nothing more can complete, so fail what is in flight rather than hang.
        for (int i = 0; i < depth_; ++i)
          if (std::find(free_ops_.begin(), free_ops_.end(), i) == free_ops_.end()) finish(i, -rc);
        return;
      }
      unsigned head = 0, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        const uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == kWakeTag) {
          if (!stop_.load()) arm_wake();
        } else {
          complete(static_cast<int>(tag), cqe->res);
        }
      }
      io_uring_cq_advance(&ring_, seen);
    }
  }

  int in_flight() const { return depth_ - static_cast<int>(free_ops_.size()); }

  ReadSink& sink_;
  BackendSetup setup_;
  io_uring ring_{};
  bool ring_ready_ = false;
  int event_fd_ = -1;
  int depth_ = 1, max_guesses_ = 1, guesses_in_flight_ = 0;
  uint64_t slots_per_buffer_ = 0;  // 0: buffers not registered
  uint64_t wake_count_ = 0;
  std::vector<Op> ops_;
  std::vector<int> free_ops_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<ReadBackend> make_uring_backend(ReadSink& sink, const BackendSetup& setup) {
  auto backend = std::make_unique<UringBackend>(sink, setup);
  const std::string why = backend->init();
  if (!why.empty()) {
    if (setup.notice)
      setup.notice(fmt::format("io_uring unavailable ({}); reading with a pread thread pool", why));
    return nullptr;
  }
  backend->start();
  return backend;
}

}  // namespace df::stream

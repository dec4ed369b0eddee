#pragma once
// A diagnostic of the VRAM tier's host-to-device link (DF_CUDA_LINK_TIMELINE=FILE): for each record copy,
// when the host queued it and when the device started and ended it (and its unpacking, where it has one);
// for each wait of the compute stream on a slot's copy, when compute reached it; and marks of the host's
// work (a step's begin and end, each download: when compute reached it, when the host had the bytes). Written
// to FILE as CSV when the first record slots or the backend go (a backend of device N > 0 writes FILE.N), for
// bench/cuda/link_timeline.py, which says how busy the link was, why it idled (nothing queued, or queued but
// held on the device) and how long compute waited for copies. Off unless the variable is set; then it costs
// three timing events a copy and one a wait, from rings made once (the latest kCopies copies, kWaits waits
// and kMarks marks are kept).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace df::backend::cuda {

class LinkTimeline {
 public:
  static constexpr size_t kCopies = 16384, kWaits = 16384, kMarks = 16384;
  // The timeline DF_CUDA_LINK_TIMELINE asks for, or null; `stream` (a cudaStream_t of device `device`) sets
  // the clock's origin.
  static std::unique_ptr<LinkTimeline> from_env(int device, void* stream);
  LinkTimeline(std::string path, void* stream);
  ~LinkTimeline();
  LinkTimeline(const LinkTimeline&) = delete;
  LinkTimeline& operator=(const LinkTimeline&) = delete;

  // Around one record's copy on `copy_stream`, then after the slot holds it (`stream`: the unpack stream,
  // or the copy stream when the copy wrote the slot itself).
  void copy_queued(void* copy_stream);
  void copied(void* copy_stream, int slot);
  void slot_written(void* stream);
  // Compute (`stream`) is about to wait for slot's last copy.
  void waits(void* stream, int slot);
  // A point of the host's work (`what`: a string literal), with when `stream` reached it when not null.
  void mark(const char* what, void* stream);
  // Writes the file (temporary name, then rename) once; the destructor calls it.
  void write();

 private:
  struct Copy {
    int64_t seq = -1;
    int64_t host_ns = 0;
    int slot = -1;
    void* start = nullptr;
    void* end = nullptr;
    void* written = nullptr;
  };
  struct Wait {
    int64_t seq = -1;
    int64_t host_ns = 0;
    int slot = -1;
    int64_t copy_seq = -1;  // the slot's last copy
    void* reached = nullptr;
  };
  struct Mark {
    int64_t seq = -1;
    int64_t host_ns = 0;
    const char* what = nullptr;
    bool on_device = false;
    void* reached = nullptr;
  };
  int64_t host_now() const;
  Copy& current_copy() { return copies_[static_cast<size_t>(n_copies_ % kCopies)]; }

  std::string path_;
  std::chrono::steady_clock::time_point origin_host_;
  void* origin_ = nullptr;
  std::vector<Copy> copies_;
  std::vector<Wait> waits_;
  std::vector<Mark> marks_;
  int64_t n_copies_ = 0, n_waits_ = 0, n_marks_ = 0;
  std::vector<int64_t> last_copy_of_slot_;
  bool written_ = false;
};

}  // namespace df::backend::cuda

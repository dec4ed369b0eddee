#include "backend/cuda/link_timeline.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/kernels.h"
#include "util/atomic_file.h"

namespace df::backend::cuda {
namespace {

cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

void* timing_event() {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreate(&e), "cudaEventCreate (link timeline)");
  return e;
}

// Microseconds from `origin` to `e`, both complete.
double micros(void* origin, void* e) {
  float ms = 0.0f;
  check_cuda(cudaEventElapsedTime(&ms, as_event(origin), as_event(e)),
             "cudaEventElapsedTime (link timeline)");
  return static_cast<double>(ms) * 1000.0;
}

}  // namespace

std::unique_ptr<LinkTimeline> LinkTimeline::from_env(int device, void* stream) {
  const char* path = std::getenv("DF_CUDA_LINK_TIMELINE");
  if (path == nullptr || *path == '\0') return nullptr;
  return std::make_unique<LinkTimeline>(device > 0 ? fmt::format("{}.{}", path, device) : std::string(path),
                                        stream);
}

LinkTimeline::LinkTimeline(std::string path, void* stream) : path_(std::move(path)) {
  copies_.resize(kCopies);
  for (Copy& c : copies_) {
    c.start = timing_event();
    c.end = timing_event();
    c.written = timing_event();
  }
  waits_.resize(kWaits);
  for (Wait& w : waits_) w.reached = timing_event();
  marks_.resize(kMarks);
  for (Mark& m : marks_) m.reached = timing_event();
  origin_ = timing_event();
  check_cuda(cudaEventRecord(as_event(origin_), as_stream(stream)), "cudaEventRecord (link timeline)");
  check_cuda(cudaEventSynchronize(as_event(origin_)), "cudaEventSynchronize (link timeline)");
  origin_host_ = std::chrono::steady_clock::now();
}

LinkTimeline::~LinkTimeline() {
  try {
    write();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "link timeline: %s\n", e.what());
  }
  for (Copy& c : copies_)
    for (void* e : {c.start, c.end, c.written}) (void)cudaEventDestroy(as_event(e));
  for (Wait& w : waits_) (void)cudaEventDestroy(as_event(w.reached));
  for (Mark& m : marks_) (void)cudaEventDestroy(as_event(m.reached));
  (void)cudaEventDestroy(as_event(origin_));
}

int64_t LinkTimeline::host_now() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_host_)
      .count();
}

void LinkTimeline::copy_queued(void* copy_stream) {
  Copy& c = current_copy();
  c.seq = -1;  // complete once copied() and slot_written() have recorded
  c.host_ns = host_now();
  check_cuda(cudaEventRecord(as_event(c.start), as_stream(copy_stream)), "cudaEventRecord (link timeline)");
}

void LinkTimeline::copied(void* copy_stream, int slot) {
  Copy& c = current_copy();
  c.slot = slot;
  check_cuda(cudaEventRecord(as_event(c.end), as_stream(copy_stream)), "cudaEventRecord (link timeline)");
}

void LinkTimeline::slot_written(void* stream) {
  Copy& c = current_copy();
  check_cuda(cudaEventRecord(as_event(c.written), as_stream(stream)), "cudaEventRecord (link timeline)");
  c.seq = n_copies_;
  if (c.slot >= static_cast<int>(last_copy_of_slot_.size()))
    last_copy_of_slot_.resize(static_cast<size_t>(c.slot) + 1, -1);
  last_copy_of_slot_[static_cast<size_t>(c.slot)] = n_copies_;
  ++n_copies_;
}

void LinkTimeline::waits(void* stream, int slot) {
  Wait& w = waits_[static_cast<size_t>(n_waits_ % kWaits)];
  w.seq = n_waits_++;
  w.host_ns = host_now();
  w.slot = slot;
  w.copy_seq =
      slot < static_cast<int>(last_copy_of_slot_.size()) ? last_copy_of_slot_[static_cast<size_t>(slot)] : -1;
  check_cuda(cudaEventRecord(as_event(w.reached), as_stream(stream)), "cudaEventRecord (link timeline)");
}

void LinkTimeline::mark(const char* what, void* stream) {
  Mark& m = marks_[static_cast<size_t>(n_marks_ % kMarks)];
  m.seq = n_marks_++;
  m.host_ns = host_now();
  m.what = what;
  m.on_device = stream != nullptr;
  // An event recorded into a stream capture becomes part of the graph, not a time the host can read back
  // (cudaEventElapsedTime refuses it): a mark reached while a step graph is captured is the host's time only.
  if (m.on_device) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(as_stream(stream), &capture), "cudaStreamIsCapturing (link timeline)");
    m.on_device = capture == cudaStreamCaptureStatusNone;
  }
  if (m.on_device)
    check_cuda(cudaEventRecord(as_event(m.reached), as_stream(stream)), "cudaEventRecord (link timeline)");
}

void LinkTimeline::write() {
  if (written_) return;
  written_ = true;
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (link timeline)");
  std::string out = "kind,seq,slot,host_us,start_us,end_us,written_us,copy_seq\n";
  const int64_t first_copy = std::max<int64_t>(0, n_copies_ - static_cast<int64_t>(kCopies));
  for (int64_t s = first_copy; s < n_copies_; ++s) {
    const Copy& c = copies_[static_cast<size_t>(s % kCopies)];
    if (c.seq != s) continue;
    out += fmt::format("copy,{},{},{:.1f},{:.1f},{:.1f},{:.1f},\n", s, c.slot, c.host_ns / 1e3,
                       micros(origin_, c.start), micros(origin_, c.end), micros(origin_, c.written));
  }
  const int64_t first_wait = std::max<int64_t>(0, n_waits_ - static_cast<int64_t>(kWaits));
  for (int64_t s = first_wait; s < n_waits_; ++s) {
    const Wait& w = waits_[static_cast<size_t>(s % kWaits)];
    if (w.seq != s) continue;
    out += fmt::format("wait,{},{},{:.1f},{:.1f},,,{}\n", s, w.slot, w.host_ns / 1e3,
                       micros(origin_, w.reached), w.copy_seq >= first_copy ? w.copy_seq : -1);
  }
  const int64_t first_mark = std::max<int64_t>(0, n_marks_ - static_cast<int64_t>(kMarks));
  for (int64_t s = first_mark; s < n_marks_; ++s) {
    const Mark& m = marks_[static_cast<size_t>(s % kMarks)];
    if (m.seq != s) continue;
    out += m.on_device ? fmt::format("{},{},,{:.1f},{:.1f},,,\n", m.what, s, m.host_ns / 1e3,
                                     micros(origin_, m.reached))
                       : fmt::format("{},{},,{:.1f},,,,\n", m.what, s, m.host_ns / 1e3);
  }
  AtomicFile file(path_);
  file.write(out.data(), out.size());
  file.commit();
}

}  // namespace df::backend::cuda

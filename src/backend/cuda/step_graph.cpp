#include "backend/cuda/step_graph.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/kernels.h"
#include "util/error.h"

namespace df::backend::cuda {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 1099511628211ull;
}

const char* mode_name(StepGraphs::Mode m) {
  switch (m) {
    case StepGraphs::Mode::Capture:
      return "capture";
    case StepGraphs::Mode::Replay:
      return "replay";
    default:
      return "eager";
  }
}

}  // namespace

StepGraphs::StepGraphs() {
  const char* v = std::getenv("DF_CUDA_GRAPH");
  enabled_ = !(v && std::strcmp(v, "0") == 0);
}

void StepGraphs::init() {
  check_cuda(cudaHostAlloc(reinterpret_cast<void**>(&dyn_host_), kMaxDynamic * sizeof(int32_t),
                           cudaHostAllocDefault),
             "cudaHostAlloc (step graph positions)");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&dyn_device_), kMaxDynamic * sizeof(int32_t)),
             "cudaMalloc (step graph positions)");
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  dyn_copied_ = e;
}

StepGraphs::~StepGraphs() {
  for (Entry& e : entries_) destroy(e);
  for (void* p : capture_kept_) (void)cudaFreeHost(p);
  if (dyn_copied_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(dyn_copied_));
  if (dyn_device_) (void)cudaFree(dyn_device_);
  if (dyn_host_) (void)cudaFreeHost(dyn_host_);
}

void StepGraphs::destroy(Entry& e) noexcept {
  if (e.exec) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e.exec));
  if (e.graph) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(e.graph));
  // A graph still running reads its kept bytes: the caller has synchronised before (see store, ~StepGraphs
  // runs after the backend's stream synchronisation).
  for (void* p : e.kept) (void)cudaFreeHost(p);
  e = Entry{};
}

void StepGraphs::set_enabled(bool on) {
  if (mode_ != Mode::Off) fail("cuda backend: step graphs cannot be switched inside a step");
  enabled_ = on;
  candidates_.clear();
}

StepGraphs::Candidate* StepGraphs::find_candidate(uint64_t key) {
  for (Candidate& c : candidates_)
    if (c.key == key) return &c;
  return nullptr;
}

void StepGraphs::forget_candidate(uint64_t key) {
  std::erase_if(candidates_, [&](const Candidate& c) { return c.key == key; });
}

StepGraphs::Entry* StepGraphs::find(uint64_t key) {
  for (Entry& e : entries_)
    if (e.exec && e.key == key) return &e;
  return nullptr;
}

void StepGraphs::begin(uint64_t key, uint64_t generation, void* stream) {
  if (mode_ != Mode::Off) cancel(stream);
  if (!enabled_) return;
  key_ = mix(key, generation);
  generation_ = generation;
  signature_ = 1469598103934665603ull;
  n_dynamic_ = 0;
  clean_ = true;
  // The previous step's upload of the positions must have left the pinned words before they are rewritten.
  check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(dyn_copied_)), "cudaEventSynchronize");
  replaying_ = find(key_);
  if (replaying_) {
    mode_ = Mode::Replay;
    return;
  }
  if (find_candidate(key_)) {
    check_cuda(cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeRelaxed),
               "cudaStreamBeginCapture");
    mode_ = Mode::Capture;
    return;
  }
  mode_ = Mode::Eager;
}

bool StepGraphs::skip(const char* op, const void* out, int64_t a, int64_t b) {
  if (mode_ == Mode::Off) return false;
  signature_ = mix(signature_, reinterpret_cast<uintptr_t>(op));
  signature_ = mix(signature_, reinterpret_cast<uintptr_t>(out));
  signature_ = mix(signature_, static_cast<uint64_t>(a));
  signature_ = mix(signature_, static_cast<uint64_t>(b));
  return mode_ == Mode::Replay;
}

void StepGraphs::unreplayable(const char* what) {
  if (mode_ == Mode::Eager) clean_ = false;
  if (mode_ == Mode::Capture || mode_ == Mode::Replay)
    fail("cuda backend: {} inside a {} step, which its eager run did not have (internal error)", what,
         mode_name(mode_));
}

const int32_t* StepGraphs::dynamic_int(int32_t value) {
  if (mode_ == Mode::Off) return nullptr;
  if (n_dynamic_ >= kMaxDynamic) {
    unreplayable("more position arguments than a step graph holds");
    return nullptr;
  }
  signature_ = mix(signature_, 0xd1u);
  const int i = n_dynamic_++;
  if (mode_ == Mode::Eager) return nullptr;
  dyn_host_[i] = value;
  return dyn_device_ + i;
}

void* StepGraphs::keep_host_bytes(const void* src, size_t bytes) {
  void* p = nullptr;
  check_cuda(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault),
             "cudaHostAlloc (step graph copy)");
  std::memcpy(p, src, bytes);
  capture_kept_.push_back(p);
  return p;
}

void StepGraphs::launch(Entry& e, void* stream) {
  cudaStream_t s = as_stream(stream);
  if (e.n_dynamic > 0) {
    check_cuda(cudaMemcpyAsync(dyn_device_, dyn_host_, static_cast<size_t>(e.n_dynamic) * sizeof(int32_t),
                               cudaMemcpyHostToDevice, s),
               "cudaMemcpyAsync (step positions)");
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(dyn_copied_), s), "cudaEventRecord");
  }
  check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(e.exec), s), "cudaGraphLaunch");
  e.last_use = ++clock_;
}

void StepGraphs::store(Entry e) {
  if (entries_.size() >= kMaxEntries) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    // Nothing of the evicted graph may still run when its kept bytes go.
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    destroy(*oldest);
    entries_.erase(oldest);
  }
  entries_.push_back(std::move(e));
}

void StepGraphs::end(uint64_t generation, void* stream) {
  const Mode mode = mode_;
  mode_ = Mode::Off;
  if (mode == Mode::Off) return;
  const bool same_generation = generation == generation_;
  if (mode == Mode::Eager) {
    ++counts_.eager;
    forget_candidate(key_);
    if (clean_ && same_generation) {
      if (candidates_.size() >= kMaxCandidates) candidates_.erase(candidates_.begin());
      candidates_.push_back(Candidate{key_, signature_, n_dynamic_});
    }
    return;
  }
  if (mode == Mode::Replay) {
    Entry& e = *replaying_;
    replaying_ = nullptr;
    if (signature_ != e.signature || n_dynamic_ != e.n_dynamic) {
      destroy(e);
      entries_.erase(entries_.begin() + (&e - entries_.data()));
      fail("cuda backend: a step's ops differ from the graph recorded under the same key (internal error)");
    }
    launch(e, stream);
    ++counts_.replays;
    return;
  }
  // Capture: the ops were recorded, not run; the graph is this step's work, launched whatever happens next.
  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamEndCapture(as_stream(stream), &graph), "cudaStreamEndCapture");
  Entry e;
  e.key = key_;
  e.signature = signature_;
  e.n_dynamic = n_dynamic_;
  e.graph = graph;
  e.kept = std::move(capture_kept_);
  capture_kept_.clear();
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  if (err != cudaSuccess) {
    destroy(e);
    check_cuda(err, "cudaGraphInstantiate");
  }
  e.exec = exec;
  launch(e, stream);
  ++counts_.captures;
  const Candidate* c = find_candidate(key_);
  const bool keep = same_generation && c && signature_ == c->signature && n_dynamic_ == c->n_dynamic;
  forget_candidate(key_);
  if (keep) {
    store(std::move(e));
  } else {
    check_cuda(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
    destroy(e);
  }
}

void StepGraphs::cancel(void* stream) noexcept {
  if (mode_ == Mode::Capture) {
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(as_stream(stream), &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    for (void* p : capture_kept_) (void)cudaFreeHost(p);
    capture_kept_.clear();
  }
  forget_candidate(key_);
  mode_ = Mode::Off;
  replaying_ = nullptr;
}

}  // namespace df::backend::cuda

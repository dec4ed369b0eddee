#pragma once
// Forward steps as CUDA graphs (Backend::begin_step, docs/ARCHITECTURE.md "CUDA backend"). A decode step of a
// model with every expert in VRAM is ~600 kernel launches that differ from one step to the next only in the
// position; launched one by one the host spends more time launching than the GPU computing. So a step is
// run eagerly the first time its key is seen (recording a signature of its ops), captured into a graph the
// next time the same key comes with the same signature and nothing allocated in between, and from then on
// replayed: the model's host code still calls every op (checking its arguments and adding it to the step's
// signature) but the ops launch nothing, and end() launches the graph. A replay whose signature differs
// from the graph's is refused with an error, never run.
//
// The positions: the kernels that take one as an argument (KV store, attention) read it through
// dynamic_int(), a word of a device array the step uploads before each graph launch.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace df::backend::cuda {

class StepGraphs {
 public:
  enum class Mode { Off, Eager, Capture, Replay };

  // DF_CUDA_GRAPH=0 in the environment turns graphs off (every step eager), for comparisons.
  StepGraphs();
  // Its device memory, on the current device (the backend calls it once that is set).
  void init();
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  void set_enabled(bool on);
  bool enabled() const { return enabled_; }
  Mode mode() const { return mode_; }
  // Graph launches, captures and eager steps so far (tests and benchmarks read them).
  struct Counts {
    uint64_t replays = 0, captures = 0, eager = 0;
  };
  Counts counts() const { return counts_; }

  // `generation` counts the backend's allocations and frees: a graph holds addresses, so it serves only
  // the generation it was captured in.
  void begin(uint64_t key, uint64_t generation, void* stream);
  // Ends the step; in Capture and Replay modes launches its graph on the stream.
  void end(uint64_t generation, void* stream);
  void cancel(void* stream) noexcept;

  // An op of the step, identified by its name, its output and two sizes: folded into the signature. True
  // when the op must launch nothing (Replay: the graph does it).
  bool skip(const char* op, const void* out, int64_t a, int64_t b);
  // Something in the step that a graph cannot hold (a transfer to or from the host, a synchronisation, an
  // allocation): the step stays eager. In Capture or Replay mode it is an error (the eager run of the same
  // key had none), raised before anything is half done.
  void unreplayable(const char* what);
  // A launch argument that may differ between replays: in a recorded step the device word the kernel must
  // read it from, in an eager step nullptr (the kernel takes the value itself).
  const int32_t* dynamic_int(int32_t value);
  // In Capture mode, host bytes that a captured copy will read at every replay: a copy owned by the graph.
  void* keep_host_bytes(const void* src, size_t bytes);

 private:
  struct PinnedBlock {
    void* host = nullptr;
  };
  struct Entry {
    uint64_t key = 0, signature = 0, last_use = 0;
    int n_dynamic = 0;
    void* graph = nullptr;    // cudaGraph_t
    void* exec = nullptr;     // cudaGraphExec_t
    std::vector<void*> kept;  // pinned host blocks its copies read
  };
  static void destroy(Entry& e) noexcept;
  Entry* find(uint64_t key);
  void launch(Entry& e, void* stream);
  void store(Entry e);

  static constexpr int kMaxDynamic = 4096;
  static constexpr size_t kMaxEntries = 4;
  bool enabled_ = true;
  Mode mode_ = Mode::Off;
  uint64_t key_ = 0, signature_ = 0, generation_ = 0, clock_ = 0;
  int n_dynamic_ = 0;
  bool clean_ = true;  // nothing unreplayable seen in this step
  // Keys whose last eager run was clean, with its signature: captured when they come again. A few, so that
  // sequences decoded in alternation (each its own key) are all recorded.
  struct Candidate {
    uint64_t key = 0, signature = 0;
    int n_dynamic = 0;
  };
  static constexpr size_t kMaxCandidates = 8;
  std::vector<Candidate> candidates_;  // oldest first
  Candidate* find_candidate(uint64_t key);
  void forget_candidate(uint64_t key);
  std::vector<Entry> entries_;
  Entry* replaying_ = nullptr;
  std::vector<void*> capture_kept_;
  int32_t* dyn_host_ = nullptr;  // pinned
  int32_t* dyn_device_ = nullptr;
  void* dyn_copied_ = nullptr;  // cudaEvent_t after the last upload of dyn_host_
  Counts counts_;
};

}  // namespace df::backend::cuda

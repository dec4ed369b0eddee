#pragma once
// The CUDA backend (docs/ARCHITECTURE.md "CUDA backend"): every op of backend.h as kernels on one stream of
// one GPU, with the CPU backend's numerics (activations quantized exactly as llama.cpp's CPU path, the same
// per-block integer dot products and scalings; only float summation order differs).
//
// This header has no CUDA types in it, so that plain C++ (the factory, tests) can include it; the kernels and
// their launchers live in the .cu files of this folder (kernels.h), the host-side checks and orchestration
// in the .cpp files.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/link_timeline.h"
#include "backend/cuda/step_graph.h"
#include "backend/cuda_host/warp_order.h"
#include "util/op_profile.h"

namespace df::backend {

class CudaBackend final : public Backend {
 public:
  // The GPU of that index (cudaSetDevice); df::Error when it cannot be used. host_threads: the host threads
  // that compute experts a device tier leaves in host memory (RoutedExperts::host; <= 0: one per core).
  explicit CudaBackend(int device_index, int host_threads = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return name_; }
  uint64_t peak_device_bytes() const override { return peak_; }
  int n_threads() const override { return 1; }
  int device_index() const { return device_; }
  // How many CUDA devices the driver sees; df::Error naming cudaGetDeviceCount's error when none can be had.
  static int device_count();

  DeviceBuffer alloc(size_t bytes, const char* what) override;
  void upload(Buf<uint8_t> dst, const void* src, size_t bytes) override;
  void download(void* dst, Buf<const uint8_t> src, size_t bytes) override;
  void copy(Buf<uint8_t> dst, Buf<const uint8_t> src, size_t bytes) override;
  void fill_zero(Buf<uint8_t> dst, size_t bytes) override;
  void queue_read_back(int slot, Buf<const uint8_t> src, size_t bytes) override;
  void read_back(int slot, void* dst, size_t bytes) override;
  // A GPU step need not wait for the host's argmax and uploads: greedy steps queued ahead took resident
  // decode from ~595 to ~668 tok/s on an H100 (docs/PERF.md, session 39). DF_GREEDY_AHEAD=0 turns it off.
  bool runs_ahead_of_host() const override { return true; }
  using Backend::copy;
  using Backend::download;
  using Backend::fill_zero;
  using Backend::upload;

  quant::RowPacking preferred_packing(GgmlType type, int64_t n_out) const override;
  UploadedWeights upload_weights(const WeightSource& src) override;
  std::unique_ptr<RecordSlots> make_record_slots(int n_slots, size_t record_bytes) override;
  void register_host_memory(void* data, size_t bytes) override;
  void unregister_host_memory(void* data) noexcept override;
  std::optional<uint64_t> free_device_bytes() const override;
  bool supports_matmul(GgmlType w) const override;

  size_t matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const override;
  void matmul(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y, Buf<uint8_t> scratch) override;
  void matmul_add(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y, Buf<float> acc,
                  Buf<uint8_t> scratch) override;
  size_t max_matmul_tasks() const override { return 1024; }
  void matmul_many(std::span<const MatmulTask> tasks, int64_t rows) override;
  void norm_matmul_many(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight, float eps,
                        Buf<float> xn, std::span<const MatmulTask> tasks) override;
  void ffn(std::span<const FfnTask> ffns, const ActivationParams& act, Buf<const float> x, int64_t x_rows,
           Buf<float> out) override;
  // Decode-sized batches: the FFN tables are built on the device from the routing ids (no host round trip).
  int64_t max_routed_tokens() const override { return 16; }
  int64_t batch_invariant_rows() const override;
  void routed_ffn(const RoutedExperts& experts, const ActivationParams& act, Buf<const int32_t> ids,
                  int64_t T, int k, Buf<const float> x, Buf<float> out) override;
  // SwiGLU experts of Q4_0 (ggml rows or Q4_0x16) or Q8_0 without gate/up biases, k of 2, 4, 6 or 8: the
  // host computes them in the routed kernels' order (cuda_host/warp_order.h) while the GPU computes the
  // others, and the combine kernel takes their sums.
  bool computes_host_experts(const ActivationParams& act, const Weight& gate, const Weight& up,
                             const Weight& down, int k, bool gate_up_biases) const override;
  void routed_ffn_add(const RoutedExperts& experts, const ActivationParams& act, Buf<const int32_t> ids,
                      Buf<const float> weights, int64_t T, int k, Buf<const float> x, Buf<float> out,
                      Buf<float> acc) override;
  void get_rows(const Weight& table, Buf<const int32_t> ids, int64_t n, Buf<float> out) override;
  void gather_rows(Buf<const float> table, int64_t width, Buf<const int32_t> ids, int64_t n,
                   Buf<float> out) override;
  void argmax(Buf<const float> x, int64_t rows, int64_t n, Buf<int32_t> ids) override;

  void rms_norm(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight, float eps,
                Buf<float> y) override;
  void rope(Buf<float> x, int64_t rows, int n_head, int head_dim, Buf<const int32_t> pos,
            const RopeParams& p) override;
  void norm_rope(std::span<const NormRopeTask> tasks, int64_t rows, int head_dim, float eps,
                 Buf<const int32_t> pos, const RopeParams& p) override;

  void kv_store(const KvCacheView& kv, Buf<const float> k, Buf<const float> v, int64_t rows,
                int pos0) override;
  size_t attention_scratch_floats(int n_ctx, int head_dim) const override;
  // What attention() wants from the caller, before a backend exists (memory planning): nothing to speak of,
  // its scratch is its own (see attention.cu).
  static size_t attention_scratch_floats_for(int n_ctx, int head_dim);
  void attention(const KvCacheView& kv, Buf<const float> q, int64_t rows, int pos0, const AttentionParams& p,
                 Buf<float> out, Buf<float> scratch) override;

  void delta_net_conv(Buf<const float> u, int64_t rows, int64_t channels, Buf<const float> conv_w, int taps,
                      Buf<float> state, Buf<float> y) override;
  void gated_delta_net(const DeltaNetParams& p, Buf<const float> qkv, Buf<const float> alpha,
                       Buf<const float> beta, int64_t rows, Buf<float> state, Buf<float> out) override;
  void mul_sigmoid(Buf<float> x, Buf<const float> gate, int64_t rows, int64_t n, int64_t gate_n) override;
  void short_conv(Buf<const float> bcx, int64_t rows, int64_t n, Buf<const float> conv_w, int l_cache,
                  Buf<float> state, Buf<float> y) override;

  void swiglu(Buf<const float> gate, Buf<const float> up, int64_t n, Buf<float> y) override;
  void add(Buf<float> x, Buf<const float> y, int64_t n) override;
  void add_bias_rows(Buf<float> x, Buf<const float> bias, int64_t rows, int64_t n) override;
  void scale(Buf<float> x, int64_t n, float s) override;
  void mul_rows(Buf<float> x, Buf<const float> w, int64_t rows, int64_t n) override;
  // CUDA's tanhf (max 2 ulp from the correctly rounded value) where the CPU has glibc's.
  void softcap(Buf<float> x, int64_t n, float cap) override;

  void route(const RouterParams& p, Buf<const float> logits, int64_t rows, Buf<int32_t> ids,
             Buf<float> weights) override;
  void norm_route(const RouterParams& p, Buf<const float> x, int64_t rows, int64_t n, Buf<const float> norm,
                  float eps, const Weight& router, Buf<uint8_t> scratch, Buf<float> xn, Buf<float> logits,
                  Buf<int32_t> ids, Buf<float> weights) override;
  void moe_combine_add(Buf<const float> expert_out, Buf<const float> weights, int64_t rows, int k, int64_t n,
                       Buf<float> x) override;

  // Waits for every op queued so far and reports a failure a kernel recorded (see DeviceError below).
  void synchronize();

  // Steps as CUDA graphs (step_graph.h): recorded on the second eager run of a key, replayed after.
  void begin_step(uint64_t key) override;
  void end_step() override;
  void cancel_step() noexcept override;
  uint64_t steps_replayed() const override { return graph_.counts().replays; }
  // How many products have read a producer's quantized rows (quantized_input) instead of quantizing the
  // floats themselves: what the tests see of the hand-over, whose outputs are the same bits either way.
  uint64_t quantized_rows_taken() const { return quantized_rows_taken_; }
  // How many launches of matmul_many carried several of its products (launch_matmul_group).
  uint64_t matmul_groups_launched() const { return matmul_groups_launched_; }

 protected:
  void free_memory(void* data, size_t bytes) noexcept override;

 private:
  friend class CudaRecordSlots;  // its pool is backend memory (raw_alloc), its copies order with stream_
  // Device memory the backend keeps for itself (op scratch), grown on demand and never shrunk, so that a
  // warm decode loop allocates nothing.
  struct Scratch {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  void* grow(Scratch& s, size_t bytes, const char* what);
  void* raw_alloc(size_t bytes, const char* what);
  void raw_free(void* p, size_t bytes) noexcept;
  // Host bytes to the device, stream-ordered through a pinned staging slot (no wait for the GPU); returns
  // the device copy (inside `dst`). Used for the small per-call tables (FFN task descriptors).
  void stage_to_device(void* dst, const void* src, size_t bytes);
  // Quantizes `rows` rows of x (n wide) to act format at dst (act_row_stride apart). Returns the stride.
  void quantize_rows(GgmlType act, const float* x, int64_t rows, int64_t n, void* dst);
  void check_error_word();
  // rms_norm's checks and launch; quantize: its rows also written as Q8_0 rows for the products of the op
  // after it (quantized_output; only where rms_norm_q8_shape holds).
  void normed_rows(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight, float eps,
                   Buf<float> y, bool quantize);
  // matmul's checks and launch, its products written to y or (accumulate) added to it.
  void matmul_rows(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y, Buf<uint8_t> scratch,
                   bool accumulate);
  // ffn's tasks whose kernels are one choice (all above kMatvecMaxRows rows, or none).
  void ffn_group(std::span<const FfnTask> ffns, const ActivationParams& act, Buf<const float> x,
                 int64_t x_rows, Buf<float> out);
  void ffn_launches(const FfnTask& a, const ActivationParams& act, Buf<const float> x, int64_t x_rows,
                    Buf<float> out, int64_t out_rows_total, uint8_t* table, size_t items_off, size_t task_off,
                    size_t map_off, int64_t entries, int64_t n_items, int max_cols, bool row_map_ready);
  // The step graphs' skip (step_graph.h), counting the ops that launch: every op that writes device memory
  // calls it once, or note_op() where it does not launch through it (uploads, the host experts' path).
  bool skip_op(const char* op, const void* out, int64_t a, int64_t b) {
    note_op();
    return graph_.skip(op, out, a, b);
  }
  void note_op() { ++op_seq_; }
  // A producer's output rows also written as Q8_0 rows (act_row_stride apart) for the products that read
  // them next (the conv's for its out_proj, attention's for wo, norm_matmul_many's norm for its products):
  // those read 2.3 KB of quantized rows, where each of their blocks would read the floats and quantize them
  // after its wait (docs/PERF.md, sessions 31-32). Valid only for the very next op, so that no op in between
  // can have rewritten the floats: the producer calls it after its skip_op, and quantized_input() gives the
  // rows to the op that asks if it is that op and reads those floats.
  uint8_t* quantized_output(const float* x, int64_t rows, int64_t n);
  const uint8_t* quantized_input(const float* x, int64_t rows, int64_t n);
  struct QuantizedRows {
    const float* x = nullptr;
    int64_t rows = 0, n = 0;
    const uint8_t* q = nullptr;
    uint64_t op = 0;
  };
  QuantizedRows quantized_rows_;
  Scratch quantized_rows_scratch_;
  uint64_t op_seq_ = 0, quantized_rows_taken_ = 0, matmul_groups_launched_ = 0;
  // Times the op in scope when DF_CUDA_PROFILE is set (op_profile.h).
  auto timed(const OpKey& key) {
    return OpTimer(
        profile_, [this] { synchronize(); }, [] { return PoolTimes{}; }, 0, key);
  }

  int device_ = 0;
  std::string name_;
  void* stream_ = nullptr;  // cudaStream_t
  // Pinned staging ring for host-to-device copies that must not wait for the GPU.
  struct StagingSlot {
    void* host = nullptr;
    void* event = nullptr;  // cudaEvent_t recorded after the slot's copy
    bool used = false;
  };
  static constexpr size_t kStagingSlots = 8, kStagingSlotBytes = size_t{256} << 10;
  std::vector<StagingSlot> staging_;
  size_t next_slot_ = 0;
  // A failure a kernel found (a token id out of range, ...): mapped pinned memory the kernels write and the
  // host reads after each synchronisation, so that checking costs no transfer.
  void* error_word_host_ = nullptr;
  void* error_word_device_ = nullptr;
  // queue_read_back's slots: pinned host memory, each with the event recorded after its copy.
  void* read_back_host_ = nullptr;
  std::array<void*, kReadBackSlots> read_back_events_{};
  Scratch act_scratch_, ffn_scratch_, desc_scratch_, attn_scratch_, routed_scratch_;
  Scratch route_counter_;  // norm_route's count of finished blocks (zero between launches)
  OpProfile profile_{"DF_CUDA_PROFILE", "cuda op profile (each op synchronised)"};
  cuda::StepGraphs graph_;
  // DF_CUDA_LINK_TIMELINE (link_timeline.h): the record slots' copies, the steps and the downloads.
  std::unique_ptr<cuda::LinkTimeline> timeline_;
  size_t in_use_ = 0, peak_ = 0;  // device memory this backend holds (allocation granules)
  uint64_t generation_ = 0;       // allocations and frees so far (a recorded graph holds addresses)
  // Host-side tables of the grouped ops, kept between calls so that a warm decode loop allocates nothing.
  struct MatmulManyHost {
    struct Quantized {
      const float* x;
      int64_t n_in;
      GgmlType act;
      size_t offset;
    };
    std::vector<Quantized> done;
    std::vector<size_t> offset_of;
    std::vector<const uint8_t*> act_rows;
  } matmul_many_host_;
  struct FfnHost;  // ops_matmul.cpp (it holds kernel-side types)
  struct FfnHostDeleter {
    void operator()(FfnHost* p) const;
  };
  std::unique_ptr<FfnHost, FfnHostDeleter> ffn_host_;
  // routed_ffn_add's experts computed on the host: the pinned bytes that cross (the input rows and ids down,
  // the down sums up), the event the host waits on for the former, the runner and its job list.
  void routed_ffn_add_host(const RoutedExperts& ex, const ActivationParams& act, const void* call,
                           Buf<const int32_t> ids, Buf<const float> weights, int64_t T, int k,
                           Buf<const float> x, Buf<float> acc);
  int host_threads_ = 0;
  void* host_io_ = nullptr;
  size_t host_io_bytes_ = 0;
  void* host_in_event_ = nullptr;  // cudaEvent_t
  Scratch host_v_scratch_;
  std::unique_ptr<cuda_host::HostExpertRunner> host_runner_;
  std::vector<cuda_host::HostExpertJob> host_jobs_;
};

}  // namespace df::backend

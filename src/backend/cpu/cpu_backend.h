#pragma once
// The CPU backend: the SIMD dot-product kernels of backend/cpu/kernels (chosen at run time, bit-identical
// to the scalar references of quant/ for the quantized types) on a persistent thread pool.
//
// Every output element is computed by the same operations whatever the batch size, the split into tasks or
// the thread count: activations are quantized per row, each product element is one kernel dot product (the
// kernels' tiles give the same bits as a single dot), attention works per query row. So results depend
// neither on how tokens are batched nor on n_threads.
//
// The grouped ops (matmul_many, ffn) run several products as one parallel job: a decode step's matrices are
// small (a MoE expert of a 1-2B-active model is a few hundred KB), so splitting each product over the
// threads separately would spend more on waking and waiting than on computing.
#include <array>
#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/buffer_access.h"
#include "backend/cpu/kernels/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "util/op_profile.h"

namespace df::backend {

class CpuBackend : public Backend {
 public:
  // n_threads <= 0: one per hardware core. The SIMD level is kernels::select_simd_level() (DF_SIMD
  // overrides it; df::Error for a level this machine cannot run).
  explicit CpuBackend(int n_threads = 0);
  CpuBackend(int n_threads, kernels::SimdLevel level);

  std::string_view name() const override { return "cpu"; }
  int n_threads() const override { return pool_.size(); }
  bool reads_host_memory() const override { return true; }
  kernels::SimdLevel simd_level() const { return level_; }

  // The CPU backend's memory is host memory: a view of n elements at p, for callers that hold host arrays
  // of their own (the backend's tests). Model code never has a CpuBackend to ask.
  template <class T>
  static Buf<T> host(T* p, size_t n) {
    return BufferAccess::wrap(p, n);
  }

  // Zeroed memory aligned for the SIMD kernels; large buffers on huge pages (util/huge_page_buffer.h).
  DeviceBuffer alloc(size_t bytes, const char* what) override;
  void upload(Buf<uint8_t> dst, const void* src, size_t bytes) override;
  void download(void* dst, Buf<const uint8_t> src, size_t bytes) override;
  void copy(Buf<uint8_t> dst, Buf<const uint8_t> src, size_t bytes) override;
  void fill_zero(Buf<uint8_t> dst, size_t bytes) override;
  void queue_read_back(int slot, Buf<const uint8_t> src, size_t bytes) override;
  void read_back(int slot, void* dst, size_t bytes) override;
  using Backend::copy;
  using Backend::download;
  using Backend::fill_zero;
  using Backend::upload;

  quant::RowPacking preferred_packing(GgmlType type, int64_t n_out) const override;
  // Q4_0 matrices of whole 16-row groups are repacked to Q4_0x16 (quant/q4_0x16.h) unless rows are looked up.
  UploadedWeights upload_weights(const WeightSource& src) override;
  std::unique_ptr<RecordSlots> make_record_slots(int n_slots, size_t record_bytes) override;
  bool supports_matmul(GgmlType w) const override;
  size_t matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const override;
  void matmul(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y, Buf<uint8_t> scratch) override;
  void matmul_add(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y, Buf<float> acc,
                  Buf<uint8_t> scratch) override;
  void get_rows(const Weight& table, Buf<const int32_t> ids, int64_t n, Buf<float> out) override;
  void gather_rows(Buf<const float> table, int64_t width, Buf<const int32_t> ids, int64_t n,
                   Buf<float> out) override;
  void argmax(Buf<const float> x, int64_t rows, int64_t n, Buf<int32_t> ids) override;

  // Products that read the same x (for the same activation format) share its quantization.
  static constexpr size_t kMaxMatmulTasks = 8;
  size_t max_matmul_tasks() const override { return kMaxMatmulTasks; }
  void matmul_many(std::span<const MatmulTask> tasks, int64_t rows) override;
  void norm_matmul_many(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight, float eps,
                        Buf<float> xn, std::span<const MatmulTask> tasks) override;

  // Two parallel jobs over (FFN, row block, token tile): gate and up with the biases, the activation and
  // the quantization of the down input fused in, then down (bias and scale fused into the scatter). Scratch
  // is the backend's own (grown when a call needs more, never shrunk).
  void ffn(std::span<const FfnTask> ffns, const ActivationParams& act, Buf<const float> x, int64_t x_rows,
           Buf<float> out) override;

  // The host-grouped ffn() is the CPU's fastest way (the ids are host memory anyway), so the models never
  // call routed_ffn here (0); it exists, the same bits as the grouped path, for the interface's sake.
  int64_t max_routed_tokens() const override { return 0; }
  void routed_ffn(const RoutedExperts& experts, const ActivationParams& act, Buf<const int32_t> ids,
                  int64_t T, int k, Buf<const float> x, Buf<float> out) override;
  void routed_ffn_add(const RoutedExperts& experts, const ActivationParams& act, Buf<const int32_t> ids,
                      Buf<const float> weights, int64_t T, int k, Buf<const float> x, Buf<float> out,
                      Buf<float> acc) override;
  // Host experts are host memory like any slot: every routed expert may be one.
  bool computes_host_experts(const ActivationParams& act, const Weight& gate, const Weight& up,
                             const Weight& down, int k, bool gate_up_biases) const override;

  void rms_norm(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight, float eps,
                Buf<float> y) override;
  void rope(Buf<float> x, int64_t rows, int n_head, int head_dim, Buf<const int32_t> pos,
            const RopeParams& p) override;
  void norm_rope(std::span<const NormRopeTask> tasks, int64_t rows, int head_dim, float eps,
                 Buf<const int32_t> pos, const RopeParams& p) override;

  void kv_store(const KvCacheView& kv, Buf<const float> k, Buf<const float> v, int64_t rows,
                int pos0) override;
  size_t attention_scratch_floats(int n_ctx, int head_dim) const override;
  // The same for a pool of n_threads, without a backend (memory planning before anything is allocated).
  static size_t attention_scratch_floats_for(int n_ctx, int head_dim, int n_threads);
  void attention(const KvCacheView& kv, Buf<const float> q, int64_t rows, int pos0, const AttentionParams& p,
                 Buf<float> out, Buf<float> scratch) override;

  void short_conv(Buf<const float> bcx, int64_t rows, int64_t n, Buf<const float> conv_w, int l_cache,
                  Buf<float> state, Buf<float> y) override;

  void delta_net_conv(Buf<const float> u, int64_t rows, int64_t channels, Buf<const float> conv_w, int taps,
                      Buf<float> state, Buf<float> y) override;
  void gated_delta_net(const DeltaNetParams& p, Buf<const float> qkv, Buf<const float> alpha,
                       Buf<const float> beta, int64_t rows, Buf<float> state, Buf<float> out) override;
  void mul_sigmoid(Buf<float> x, Buf<const float> gate, int64_t rows, int64_t n, int64_t gate_n) override;

  void swiglu(Buf<const float> gate, Buf<const float> up, int64_t n, Buf<float> y) override;
  void add(Buf<float> x, Buf<const float> y, int64_t n) override;
  void add_bias_rows(Buf<float> x, Buf<const float> bias, int64_t rows, int64_t n) override;
  void scale(Buf<float> x, int64_t n, float s) override;
  void mul_rows(Buf<float> x, Buf<const float> w, int64_t rows, int64_t n) override;
  // Split over the pool for long rows (a vocabulary of logits): tanhf is the cost.
  void softcap(Buf<float> x, int64_t n, float cap) override;

  void route(const RouterParams& p, Buf<const float> logits, int64_t rows, Buf<int32_t> ids,
             Buf<float> weights) override;
  void norm_route(const RouterParams& p, Buf<const float> x, int64_t rows, int64_t n, Buf<const float> norm,
                  float eps, const Weight& router, Buf<uint8_t> scratch, Buf<float> xn, Buf<float> logits,
                  Buf<int32_t> ids, Buf<float> weights) override;
  void moe_combine_add(Buf<const float> expert_out, Buf<const float> weights, int64_t rows, int k, int64_t n,
                       Buf<float> x) override;

 protected:
  void free_memory(void* data, size_t bytes) noexcept override;

 private:
  // Times the op in scope when DF_CPU_PROFILE is set (util/op_profile.h), with what the pool's threads did.
  auto timed(const OpKey& key) {
    return OpTimer(
        profile_, [] {}, [this] { return pool_.times(); }, pool_.size(), key);
  }

  OpProfile profile_{"DF_CPU_PROFILE", "cpu op profile"};
  ThreadPool pool_;
  std::array<std::array<uint8_t, kReadBackBytes>, kReadBackSlots> read_back_slots_{};
  kernels::SimdLevel level_;
  // Grown on demand by the grouped ops, never shrunk, so that a warm decode loop allocates nothing.
  std::vector<uint8_t> act_scratch_;
  std::vector<float> thread_scratch_;
  std::vector<int64_t> task_offsets_;
  // ffn(): per FFN, how many of its gate/up tasks have finished (grown on demand, never shrunk).
  std::unique_ptr<std::atomic<int64_t>[]> ffn_ready_;
  size_t ffn_ready_capacity_ = 0;
  // routed_ffn's grouping by expert.
  std::vector<int32_t> routed_count_, routed_in_, routed_out_;
  std::vector<FfnTask> routed_tasks_;
};

}  // namespace df::backend

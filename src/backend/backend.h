#pragma once
// The operations a model's forward pass is written against (DESIGN.md "Backends"). A model never computes
// anything itself: it calls these, and each backend implements every op once for all models, with the
// numerics of llama.cpp's CPU path (ARCHITECTURES.md 1, 12.10, 13). Activations are row-major float
// arrays (`rows` rows of `n` values) in buffers the backend allocated (backend/buffer.h); weights stay in
// their GGUF block formats, in memory the backend laid out (upload_weights).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

#include "backend/buffer.h"
#include "backend/record_slots.h"
#include "gguf/ggml_types.h"
#include "quant/q4_0x16.h"

namespace df::backend {

// A weight matrix as GGUF stores it: ggml shape {n_in, n_out}, i.e. n_out rows of n_in values, each row
// `n_in / block_size` consecutive blocks of `type` — or, with packing Q4_0x16, the same bytes repacked 16
// rows at a time (quant/q4_0x16.h), which the matrix products read faster; such a weight is for matmul
// only (get_rows refuses it), and row(r) is meaningful only for r a multiple of 16 (its group's start).
// `data` is an address in the backend's memory (device memory for a GPU backend), made by upload_weights()
// or by an expert provider that asked the backend for the layout; only the backend reads through it.
struct Weight {
  GgmlType type = GgmlType::F32;
  const void* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  quant::RowPacking packing = quant::RowPacking::kNone;

  bool packed() const { return packing != quant::RowPacking::kNone; }
  size_t row_bytes() const { return ggml_row_bytes(type, n_in); }
  const uint8_t* row(int64_t r) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * row_bytes();
  }
};

// The f16 K/V cache of one attention layer, laid out as llama.cpp lays it out without flash attention:
// K by position (k[(pos * n_head_kv + h) * head_dim + d]) and V transposed
// (v[(h * head_dim + d) * n_ctx + pos]), so that both attention products are rows of f16 dot products.
struct KvCacheView {
  Buf<uint16_t> k{};
  Buf<uint16_t> v{};
  int n_ctx = 0;
  int n_head_kv = 0;
  int head_dim = 0;
};

// Router probability function (llama.cpp's expert_gating_func): sigmoid or softmax probabilities, top-k on
// them (plus the selection bias), weights from the probabilities; or SoftmaxWeight (gpt-oss): top-k of the
// raw logits, weights = softmax over the k chosen logits.
enum class Gating { Softmax = 1, Sigmoid = 2, SoftmaxWeight = 3 };

struct RouterParams {
  Gating gating = Gating::Sigmoid;
  int n_expert = 0;
  int k = 0;                          // experts chosen per token
  Buf<const float> selection_bias{};  // n_expert values added to the probabilities to choose (optional)
  bool normalize = true;              // weights / max(sum, 6.103515625e-5) (Softmax and Sigmoid only)
  float scale = 1.0f;                 // applied when not 0 and not 1 (Softmax and Sigmoid only)
};

// RoPE as ggml's rope_ext computes it (ARCHITECTURES.md 1.4): θ_i = p · base^(-2i/n_rot) by ggml's iterative
// float recurrence, divided by freq_factors[i] when given; YaRN when ext_factor != 0 (ramp between the
// interpolated angle freq_scale · θ and the extrapolated θ over the correction band from beta_fast /
// beta_slow and n_ctx_orig, magnitude 1 + 0.1 ln(1 / freq_scale)); everything scaled by attn_factor.
// NeoX rotates dims (i, i + n_rot/2), Normal rotates adjacent pairs (2i, 2i + 1). Dims past n_rot untouched.
enum class RopeMode { Normal, NeoX };
struct RopeParams {
  RopeMode mode = RopeMode::NeoX;
  int n_rot = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int n_ctx_orig = 0;
  Buf<const float> freq_factors{};  // n_rot / 2 divisors of θ_i (llama3-style rope_freqs), optional
};

// One layer's attention, llama.cpp's non-flash path: scores = (K·Q) · scale (Q rounded to f16), then
// softcap · tanh(score / softcap) when softcap > 0; a key at position j is visible from position p when
// j <= p and, with window > 0, p - j < window; softmax with the head's sink logit (not scaled) in the max and
// the denominator only, when sinks are given (exp sum in double); probabilities rounded to f16 for P·V. The
// head count and size are the layer's own (n_head here, n_head_kv and head_dim in the cache view).
struct AttentionParams {
  int n_head = 0;
  float scale = 1.0f;
  int window = 0;            // 0: every earlier position
  Buf<const float> sinks{};  // n_head logits, optional
  float softcap = 0.0f;      // 0: none
};

// One gated delta-net layer's shapes (qwen35moe): n_k query/key heads and n_v value heads (n_v a multiple of
// n_k; v-head h reads k-head h mod n_k), every head d values; dt_bias and ssm_a the n_v decay parameters
// (ssm_dt.bias, ssm_a = −exp(A_log)); eps the L2 norm's floor.
struct DeltaNetParams {
  int n_k_heads = 0, n_v_heads = 0, head_dim = 0;
  float eps = 0.0f;
  Buf<const float> dt_bias{}, ssm_a{};
};

// One product of matmul_many: y (rows × w.n_out) = W · x (rows × w.n_in).
struct MatmulTask {
  Weight w;
  Buf<const float> x{};
  Buf<float> y{};
};

// One tensor of norm_rope: x = rows × n_head × head_dim, every head normed with weight (head_dim values,
// optional) and rotated.
struct NormRopeTask {
  Buf<float> x{};
  int n_head = 0;
  Buf<const float> weight{};
};

// The gated activation of an FFN: SwiGLU silu(g) · u; GeGLU gelu(g) · u (tanh approximation, as ggml_gelu);
// OaiSwiGLU (gpt-oss) min(g, limit) · sigmoid(alpha · min(g, limit)) · (clamp(u, -limit, limit) + 1).
enum class Activation { SwiGLU, GeGLU, OaiSwiGLU };
struct ActivationParams {
  Activation kind = Activation::SwiGLU;
  float alpha = 1.702f;  // OaiSwiGLU
  float limit = 7.0f;    // OaiSwiGLU
};

// One gated FFN of ffn(), applied to n_rows rows of its input:
//   h = act(gate · x + gate_bias, up · x + up_bias),  out = (down · h + down_bias) · out_scale
// for x = input row in_rows[i], written to output row out_rows[i] (i < n_rows). gate and up are n_ff rows
// of n_in values, down n_out rows of n_ff values; biases and the scale are optional (an expert's own).
struct FfnTask {
  Weight gate, up, down;
  Buf<const float> gate_bias{};   // n_ff
  Buf<const float> up_bias{};     // n_ff
  Buf<const float> down_bias{};   // n_out
  float out_scale = 1.0f;         // applied when not 1
  Buf<const int32_t> in_rows{};   // absent: row i
  Buf<const int32_t> out_rows{};  // absent: row i
  int64_t n_rows = 0;
};

// Every expert of one MoE layer where the backend holds them all (resident experts): expert e's gate, up and
// down are the e-th matrices of three stacks (matrix e at first.data + e · stride), its biases (optional) the
// e-th rows of n_expert × n_ff (gate, up) and n_expert × n_out (down) tables. With slot_of (n_expert entries
// in backend memory: the device tier's expert->slot map), expert e's matrices are the slot_of[e]-th instead
// (its biases still the e-th rows); only the entries of the ids routed are read.
struct ExpertStack {
  Weight first;
  size_t stride = 0;
};
// An expert that a device tier does not hold this step (--cpu-misses): its matrices in host memory (the RAM
// tier's record), which the backend reads from there, on the host, instead of from a slot; its slot_of entry
// is negative.
struct HostExpert {
  int32_t expert = -1;
  Weight gate, up, down;
};
struct RoutedExperts {
  ExpertStack gate, up, down;
  int n_expert = 0;
  Buf<const float> gate_bias{}, up_bias{}, down_bias{};
  Buf<const int32_t> slot_of{};
  // Experts computed from host memory (each id once; only with slot_of, and only where
  // computes_host_experts() said so): the results are the bits the backend gives from a slot.
  std::span<const HostExpert> host{};
  // n_expert values (optional): expert e's output scale, FfnTask::out_scale = down_scale[e] (llama.cpp's
  // ffn_down_exps_s, gemma4's per-expert scale). Like out_scale it multiplies after the down bias; llama.cpp
  // scales before adding a down bias, which no architecture with this scale has.
  Buf<const float> down_scale{};
};

// The bytes of one or more weight matrices of the same type and shape as the GGUF stores them (n_matrices
// consecutive slabs of n_out rows: a dense matrix, or every expert of a MoE tensor), for upload_weights().
struct WeightSource {
  GgmlType type = GgmlType::F32;
  // Writes the GGUF bytes of every matrix (n_matrices × slab) to dst: host memory the backend chose (its
  // own for the CPU backend, a staging buffer for a device), so that a file is read straight into place.
  std::function<void(uint8_t* dst)> read;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t n_matrices = 1;
  bool rows_looked_up = false;  // a table for get_rows (token embeddings): kept in ggml's row layout
};

// Weights laid out and stored by the backend: matrix(i) is the i-th slab, in the backend's layout.
struct UploadedWeights {
  DeviceBuffer memory;
  Weight first;           // matrix 0
  size_t slab_bytes = 0;  // bytes between consecutive matrices
  Weight matrix(int64_t i) const {
    Weight w = first;
    w.data = static_cast<const uint8_t*>(first.data) + static_cast<size_t>(i) * slab_bytes;
    return w;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual int n_threads() const = 0;
  // Whether ops can read weights in plain host memory (the CPU backend's memory is host memory). The
  // streaming expert cache hands out views of host slots to such a backend; any other one reads its experts
  // from record slots in its own memory (make_record_slots) fed from the host slots.
  virtual bool reads_host_memory() const { return false; }
  // Free device memory now (for the default size of the record slots); none for a host-memory backend.
  virtual std::optional<uint64_t> free_device_bytes() const { return std::nullopt; }
  // The most device memory this backend has held at once (its allocations: weights, states, scratch); 0 for
  // a backend whose memory is host memory (the process's peak RSS counts it).
  virtual uint64_t peak_device_bytes() const { return 0; }

  // ---- Steps. A forward pass brackets its ops (after the token and position uploads, before the logits
  // download) with begin_step/end_step when nothing between them crosses to the host. A backend may then
  // record the ops of a step once and replay the recording whenever the same key comes again (a GPU backend:
  // one CUDA graph launch instead of hundreds of kernel launches). The key names everything the op sequence
  // depends on besides the positions (the state, the batch size, the rows of logits); the positions may
  // differ between replays (the ops read them from the uploaded positions and their pos0 arguments). A
  // replay gives the bits the ops give one by one. The CPU backend runs the ops as they come.
  // cancel_step() ends a step an exception left open (StepScope below does it).
  virtual void begin_step(uint64_t key) { (void)key; }
  virtual void end_step() {}
  virtual void cancel_step() noexcept {}
  // Steps run from a recording so far (benchmarks report it; 0 for a backend that never records).
  virtual uint64_t steps_replayed() const { return 0; }

  // ---- Memory: every buffer an op reads or writes comes from here (backend/buffer.h).
  // `bytes` of zeroed memory; df::Error naming `what` and the size when it cannot be had.
  virtual DeviceBuffer alloc(size_t bytes, const char* what) = 0;
  template <class T>
  DeviceBuffer alloc_array(size_t count, const char* what) {
    return alloc(count * sizeof(T), what);
  }
  // The explicit crossings between host memory and the backend's (synchronous: on return the bytes are
  // there). A GPU backend pays a transfer for each, so the models use them only where the design needs the
  // host: token ids and positions in, the routing ids of a MoE layer out (the expert fetch needs them), the
  // logits out, the debug capture.
  virtual void upload(Buf<uint8_t> dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, Buf<const uint8_t> src, size_t bytes) = 0;
  // Read-backs that do not wait (greedy decoding queued ahead of the host: Session::greedy_start):
  // queue_read_back copies `bytes` (at most kReadBackBytes) of src into the backend's host-side slot `slot`
  // (0 .. kReadBackSlots - 1) once every op queued before it has run, and returns at once; read_back waits
  // for that copy alone and copies the slot into dst. A backend that runs its ops as they come copies at
  // once.
  static constexpr size_t kReadBackBytes = 64;
  static constexpr int kReadBackSlots = 4;
  virtual void queue_read_back(int slot, Buf<const uint8_t> src, size_t bytes) = 0;
  virtual void read_back(int slot, void* dst, size_t bytes) = 0;
  // Both's check of their arguments: df::Error for a slot or size out of range.
  static void check_read_back(int slot, size_t bytes) {
    if (slot < 0 || slot >= kReadBackSlots || bytes > kReadBackBytes)
      fail("read-back of {} bytes into slot {}: at most {} bytes into slots 0..{}", bytes, slot,
           kReadBackBytes, kReadBackSlots - 1);
  }
  // Whether the host gains from queuing the next step before the last one's results are read (a GPU: its
  // step then starts without waiting for the host; the CPU backend computes as the ops come).
  virtual bool runs_ahead_of_host() const { return false; }
  // Copies within the backend's memory (state snapshots), and zero fill (state reset).
  virtual void copy(Buf<uint8_t> dst, Buf<const uint8_t> src, size_t bytes) = 0;
  virtual void fill_zero(Buf<uint8_t> dst, size_t bytes) = 0;
  // Typed forms of the four above, `count` elements; df::Error when a view is shorter.
  template <class T>
  void upload(Buf<std::type_identity_t<T>> dst, const T* src, size_t count);
  template <class T>
  void download(T* dst, Buf<const std::type_identity_t<T>> src, size_t count);
  template <class T>
  void copy(Buf<T> dst, Buf<const std::type_identity_t<T>> src, size_t count);
  template <class T>
  void fill_zero(Buf<T> dst);

  // ---- Weights. The layout this backend reads a weight of this type and row count fastest in; whoever
  // prepares weight bytes for it (upload_weights, the expert store's ingest, the expert providers) asks here.
  virtual quant::RowPacking preferred_packing(GgmlType type, int64_t n_out) const = 0;
  // Copies the matrices into the backend's memory in its preferred layout (a table stays in row layout).
  virtual UploadedWeights upload_weights(const WeightSource& src) = 0;
  // n_slots slots of record_bytes each for expert records (backend/record_slots.h); df::Error naming the
  // size when the memory cannot be had.
  virtual std::unique_ptr<RecordSlots> make_record_slots(int n_slots, size_t record_bytes) = 0;
  // Host memory that fills read from (the RAM tier's slots): a GPU backend page-locks it so that copies run
  // at the link's speed without staging; unregister before the memory goes. No-ops elsewhere.
  virtual void register_host_memory(void* data, size_t bytes) {
    (void)data;
    (void)bytes;
  }
  virtual void unregister_host_memory(void* data) noexcept { (void)data; }
  // Whether matmul() takes weights of this block type.
  virtual bool supports_matmul(GgmlType w) const = 0;

  // ---- Ops. Views may be longer than an op reads; an op reading past a view's end is a bug (df::Error).
  // Bytes of scratch that matmul() needs for `rows` activation rows against a weight of type w, n_in wide.
  virtual size_t matmul_scratch_bytes(GgmlType w, int64_t n_in, int64_t rows) const = 0;
  // y[r][o] = W[o] · x[r] for r < rows, o < w.n_out. Each activation row is first converted to the weight's
  // vec_dot type (Q8_0, Q8_K, F16, ...) exactly as llama.cpp's CPU matmul does. x and y must not overlap.
  virtual void matmul(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y,
                      Buf<uint8_t> scratch) = 0;
  // matmul into y, then add(acc, y, rows · w.n_out): acc the bits of those two ops called in turn (one op so
  // that a GPU adds each product to the residual in the product's own store; y is scratch, which a backend
  // may leave unwritten). acc must not overlap x or y.
  virtual void matmul_add(const Weight& w, Buf<const float> x, int64_t rows, Buf<float> y, Buf<float> acc,
                          Buf<uint8_t> scratch) = 0;
  // Several products over `rows` activation rows each, as one job (a decode step's products are small; run
  // apart, each would spend more on dispatch than on compute). Each y equals matmul(w, x, rows) bit for bit.
  // At most max_matmul_tasks() products; x and y must not overlap.
  virtual size_t max_matmul_tasks() const = 0;
  virtual void matmul_many(std::span<const MatmulTask> tasks, int64_t rows) = 0;
  // rms_norm(x, rows, n, weight, eps, xn), then matmul_many(tasks, rows) with every task's x being xn (its
  // first rows · n values, w.n_in == n): xn and every y the bits of those two ops called in turn (one op so
  // that a GPU's decode products norm their own input rows instead of waiting for a norm launch). xn must not
  // overlap x or any y.
  virtual void norm_matmul_many(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight,
                                float eps, Buf<float> xn, std::span<const MatmulTask> tasks) = 0;
  // Several gated FFNs over one input x (x_rows rows of n_in), writing rows of out (n_out wide) — the chosen
  // experts of a MoE layer, each on the tokens routed to it, or one dense FFN on every row — as one job.
  // Every FFN must have the same shapes and types; the out rows written must be distinct. Each output row
  // equals matmul(gate), matmul(up), the biases, the activation, matmul(down), its bias and scale on that
  // row, bit for bit.
  virtual void ffn(std::span<const FfnTask> ffns, const ActivationParams& act, Buf<const float> x,
                   int64_t x_rows, Buf<float> out) = 0;
  // The experts of a MoE layer chosen on the device, applied without the routing ids crossing to the host:
  // out row (t · k + j) = the gated FFN of expert ids[t · k + j] on x row t (t < T, j < k), each row bit for
  // bit what ffn() gives for that expert and row. A decode step with every expert resident then needs no
  // host round trip. Up to max_routed_tokens() tokens per call (0: the backend does not do this op faster
  // than the host-grouped ffn, and the models do not call it).
  virtual int64_t max_routed_tokens() const = 0;
  // The most rows a batch may hold for each row's results to be the bits that row gets in a batch of its
  // own, whatever else the batch holds (0: any number; the CPU backend). Callers that promise results
  // independent of batching (serve's shared forwards) stay within it.
  virtual int64_t batch_invariant_rows() const { return 0; }
  virtual void routed_ffn(const RoutedExperts& experts, const ActivationParams& act, Buf<const int32_t> ids,
                          int64_t T, int k, Buf<const float> x, Buf<float> out) = 0;
  // routed_ffn into out, then moe_combine_add(out, weights, T, k, n_out, acc): acc the bits of those two ops
  // called in turn (one op so that a GPU forms each token's weighted sum inside the down product; out is
  // scratch, which a backend may leave unwritten). acc must not overlap x or out.
  virtual void routed_ffn_add(const RoutedExperts& experts, const ActivationParams& act,
                              Buf<const int32_t> ids, Buf<const float> weights, int64_t T, int k,
                              Buf<const float> x, Buf<float> out, Buf<float> acc) = 0;
  // Whether routed_ffn_add takes RoutedExperts::host for experts of these types and packings (the store's),
  // this activation and top-k, with no gate/up biases: a device that can compute such an expert from host
  // memory to the bits it gives from a slot (the CUDA backend: on the host CPU, in its kernels' order) lets a
  // device tier leave some misses there instead of copying them up. The CPU backend, whose "device" memory is
  // host memory, takes them as it takes slots (its tier stand-in runs the same chain in CI).
  virtual bool computes_host_experts(const ActivationParams& /*act*/, const Weight& /*gate*/,
                                     const Weight& /*up*/, const Weight& /*down*/, int /*k*/,
                                     bool /*gate_up_biases*/) const {
    return false;
  }
  // out[i] = row ids[i] of `table` (rows of `width` floats) for i < n, copied exactly: results formed in
  // one row order read in another (an expert split gathers its parts' results, grouped by expert, into the
  // (token, slot) order of moe_combine_add). df::Error for an id outside the table.
  virtual void gather_rows(Buf<const float> table, int64_t width, Buf<const int32_t> ids, int64_t n,
                           Buf<float> out) = 0;
  // ids[r] = the first index of the greatest of row r's n values (rows of x), a NaN never the greatest, 0
  // where the row's first value is NaN: util/argmax.h's first_argmax, which the sampler's greedy choice is.
  // Greedy decoding takes it where the logits are.
  virtual void argmax(Buf<const float> x, int64_t rows, int64_t n, Buf<int32_t> ids) = 0;
  // out[i] = row ids[i] of the table for i < n, dequantized exactly (no activation rounding).
  virtual void get_rows(const Weight& table, Buf<const int32_t> ids, int64_t n, Buf<float> out) = 0;

  // y = x / sqrt(mean(x²) + eps) per row of n values (sum of squares in double), then ⊙ weight if given.
  // x == y is allowed. Per-head norms are this op over rows * n_head rows of head_dim values.
  virtual void rms_norm(Buf<const float> x, int64_t rows, int64_t n, Buf<const float> weight, float eps,
                        Buf<float> y) = 0;
  // RoPE (RopeParams) in place on x = rows × n_head × head_dim, row r at position pos[r].
  virtual void rope(Buf<float> x, int64_t rows, int n_head, int head_dim, Buf<const int32_t> pos,
                    const RopeParams& p) = 0;

  // For each task in turn: rms_norm(x, rows * n_head, head_dim, weight, eps, x), then rope(x, rows, n_head,
  // head_dim, pos, p); each x the bits of those two calls (one op so that a GPU runs a decode step's per-head
  // norms and RoPE of Q and K as one launch, where they were four). Tasks must not overlap.
  virtual void norm_rope(std::span<const NormRopeTask> tasks, int64_t rows, int head_dim, float eps,
                         Buf<const int32_t> pos, const RopeParams& p) = 0;

  // Rounds k and v (rows × n_head_kv × head_dim each) to f16 and stores them at positions pos0.. .
  virtual void kv_store(const KvCacheView& kv, Buf<const float> k, Buf<const float> v, int64_t rows,
                        int pos0) = 0;
  // Scratch floats attention() needs for a cache of n_ctx positions.
  virtual size_t attention_scratch_floats(int n_ctx, int head_dim) const = 0;
  // Attention (AttentionParams) of q (rows × n_head × head_dim, row r at position pos0 + r) over the cache
  // positions visible from it. out = rows × n_head × head_dim.
  virtual void attention(const KvCacheView& kv, Buf<const float> q, int64_t rows, int pos0,
                         const AttentionParams& p, Buf<float> out, Buf<float> scratch) = 0;

  // LFM2 gated short convolution over `rows` consecutive tokens. bcx = rows × 3n (b | c | x); conv_w =
  // n channels × l_cache taps (tap 0 oldest); state = (l_cache - 1) × n, the previous b⊙x rows, oldest first,
  // advanced in place. y[t] = c ⊙ Σ_j w_j · (b⊙x)_{t - (l_cache-1) + j}, accumulated in float in tap order.
  virtual void short_conv(Buf<const float> bcx, int64_t rows, int64_t n, Buf<const float> conv_w, int l_cache,
                          Buf<float> state, Buf<float> y) = 0;

  // Gated delta-net (qwen35moe, ARCHITECTURES.md 5.4), over `rows` consecutive tokens of one sequence.
  // delta_net_conv: the causal depthwise conv and SiLU of the projected input u (rows × channels):
  // y[t][c] = silu(Σ_j w[c][j] · u_{t - (taps-1) + j}[c]), the sum in float in tap order (tap 0 oldest,
  // ggml_ssm_conv), where u rows before the first come from state ((taps - 1) × channels, oldest row first);
  // the state then holds the last taps - 1 raw u rows (of state and u together). y may not alias u.
  virtual void delta_net_conv(Buf<const float> u, int64_t rows, int64_t channels, Buf<const float> conv_w,
                              int taps, Buf<float> state, Buf<float> y) = 0;
  // gated_delta_net: the gated delta rule (DeltaNetParams) of the conv output qkv (rows × (2·n_k·d + n_v·d):
  // q heads, k heads, v heads) with the raw gate projections alpha and beta (rows × n_v each), into out
  // (rows × n_v × d), advancing state (n_v matrices of d × d floats, matrix h row j = S_h[·][j], i.e. value
  // column j over the key dims, ggml's transposed layout). Per token: q and k heads L2-normalised
  // (x / max(sqrt(Σx² in double), eps)); per v-head h with k-head h mod n_k: β = sigmoid(beta_h),
  // g = softplus(alpha_h + dt_bias_h) · ssm_a_h (softplus(x) = x above 20, else log(1 + e^x)); S ← e^g · S;
  // δ_j = (v_j − Σ_i S[i][j] k_i) · β; S[i][j] += k_i δ_j; out_j = (Σ_i S[i][j] q_i) / sqrt(d), as ggml's
  // gated_delta_net (its fused CPU op, token by token). A backend may compute a run of tokens in a chunked
  // form (the same recurrence re-associated): the results then agree within float rounding, not bit for bit.
  virtual void gated_delta_net(const DeltaNetParams& p, Buf<const float> qkv, Buf<const float> alpha,
                               Buf<const float> beta, int64_t rows, Buf<float> state, Buf<float> out) = 0;
  // x[r][i] = x[r][i] · sigmoid(gate[r][gate_n == 1 ? 0 : i]) for r < rows, i < n, gate_n 1 or n:
  // ggml_sigmoid (1 / (1 + expf(-g)), rounded to float) then ggml_mul, broadcasting a one-value gate over its
  // row.
  virtual void mul_sigmoid(Buf<float> x, Buf<const float> gate, int64_t rows, int64_t n, int64_t gate_n) = 0;

  // y = silu(gate) ⊙ up over n values (y may alias gate or up).
  virtual void swiglu(Buf<const float> gate, Buf<const float> up, int64_t n, Buf<float> y) = 0;
  // x += y over n values.
  virtual void add(Buf<float> x, Buf<const float> y, int64_t n) = 0;
  // x[r] += bias for r < rows (n values per row), as ggml_add broadcasts a bias vector.
  virtual void add_bias_rows(Buf<float> x, Buf<const float> bias, int64_t rows, int64_t n) = 0;
  // x[i] = x[i] · s over n values: ggml_scale (one float product each; ggml_mul by a one-value tensor gives
  // the same bits).
  virtual void scale(Buf<float> x, int64_t n, float s) = 0;
  // x[r][i] = x[r][i] · w[i] for r < rows (n values per row), as ggml_mul broadcasts a vector.
  virtual void mul_rows(Buf<float> x, Buf<const float> w, int64_t rows, int64_t n) = 0;
  // Logit softcapping as llama.cpp's graph writes it (ggml_scale by 1/cap, ggml_tanh, ggml_scale by cap) over
  // n values: x[i] = tanhf(x[i] · r) · cap, r = 1.0f / cap rounded to float first. The CPU calls the C
  // library's tanhf as ggml does; a GPU backend its own (within a few ulp).
  virtual void softcap(Buf<float> x, int64_t n, float cap) = 0;

  // Expert choice for `rows` rows of router logits (rows × n_expert): ids (rows × k) in selection order
  // (descending score, lowest id first on exact ties) and their weights (rows × k), as build_moe_ffn does.
  virtual void route(const RouterParams& p, Buf<const float> logits, int64_t rows, Buf<int32_t> ids,
                     Buf<float> weights) = 0;
  // A MoE layer's routing as one op: xn = rms_norm(x) ⊙ norm (rows of n values), logits = router · xn, then
  // route(p, logits) into ids and weights, each result the bits of those three ops called in turn (a backend
  // may run them as one pass: a decode step's routing is three tiny launches on a GPU). scratch as matmul's.
  virtual void norm_route(const RouterParams& p, Buf<const float> x, int64_t rows, int64_t n,
                          Buf<const float> norm, float eps, const Weight& router, Buf<uint8_t> scratch,
                          Buf<float> xn, Buf<float> logits, Buf<int32_t> ids, Buf<float> weights) = 0;
  // x[r] += Σ_j weights[r][j] · expert_out[r][j], the sum formed in slot order before it is added
  // (expert_out = rows × k × n): the MoE output combined into the residual stream in one pass.
  virtual void moe_combine_add(Buf<const float> expert_out, Buf<const float> weights, int64_t rows, int k,
                               int64_t n, Buf<float> x) = 0;

 protected:
  friend class DeviceBuffer;
  // Frees what alloc() returned (DeviceBuffer's destructor calls it).
  virtual void free_memory(void* data, size_t bytes) noexcept = 0;
};

// begin_step for a scope; end() closes it, leaving the scope without end() (an exception) cancels it.
class StepScope {
 public:
  StepScope(Backend& be, uint64_t key) : be_(&be) { be.begin_step(key); }
  ~StepScope() {
    if (be_) be_->cancel_step();
  }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;
  void end() {
    Backend* be = be_;
    be_ = nullptr;
    be->end_step();
  }

 private:
  Backend* be_;
};

inline DeviceBuffer::~DeviceBuffer() {
  if (backend_ && data_) backend_->free_memory(data_, bytes_);
}

template <class T>
void Backend::upload(Buf<std::type_identity_t<T>> dst, const T* src, size_t count) {
  if (count > dst.size()) fail("upload of {} elements into a buffer view of {}", count, dst.size());
  upload(dst.bytes(), src, count * sizeof(T));
}

template <class T>
void Backend::download(T* dst, Buf<const std::type_identity_t<T>> src, size_t count) {
  if (count > src.size()) fail("download of {} elements from a buffer view of {}", count, src.size());
  download(dst, src.bytes(), count * sizeof(T));
}

template <class T>
void Backend::copy(Buf<T> dst, Buf<const std::type_identity_t<T>> src, size_t count) {
  if (count > dst.size() || count > src.size())
    fail("copy of {} elements between buffer views of {} and {}", count, src.size(), dst.size());
  copy(dst.bytes(), src.bytes(), count * sizeof(T));
}

template <class T>
void Backend::fill_zero(Buf<T> dst) {
  fill_zero(dst.bytes(), dst.size() * sizeof(T));
}

}  // namespace df::backend

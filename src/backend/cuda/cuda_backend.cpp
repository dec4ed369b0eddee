// CudaBackend: construction, error reporting, memory, transfers and weights. The ops' host sides are in
// ops.cpp and ops_matmul.cpp, their kernels in the .cu files.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "backend/buffer_access.h"
#include "backend/cuda/cuda_record_slots.h"
#include "backend/cuda/kernels.h"
#include "util/error.h"
#include "util/huge_page_buffer.h"

namespace df::backend {
namespace cuda {

void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error so that later calls are not blamed for it
  fail("cuda backend: {} failed: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }

}  // namespace cuda

using cuda::check_cuda;

namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
// Allocations are rounded up to this, so that the kernels' aligned 16-byte loads of a row's last partial
// chunk never leave the allocation.
constexpr size_t kAllocGranule = 256;

// The CUDA runtime loads a kernel lazily, at its first launch, by default: the first prompt of a process then
// waits tens of milliseconds for the dozens of kernels it meets (measured on an H200: pp512 of the small
// preset 12.5k tok/s lazy, 69k tok/s eager). Loading every kernel when the runtime starts costs a fraction
// of a second of load time instead. Must run before the first CUDA call of the process; a CUDA_MODULE_LOADING
// the user set is kept.
void prefer_eager_module_loading() {
  static const bool done = [] { return setenv("CUDA_MODULE_LOADING", "EAGER", 0) == 0; }();
  (void)done;
}

}  // namespace

int CudaBackend::device_count() {
  prefer_eager_module_loading();
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail("no CUDA device can be used: cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(err),
         cudaGetErrorName(err));
  }
  return n;
}

CudaBackend::CudaBackend(int device_index, int host_threads)
    : device_(device_index), name_(fmt::format("cuda:{}", device_index)), host_threads_(host_threads) {
  const int n = device_count();
  if (n == 0) fail("no CUDA device can be used: the driver sees no GPU");
  if (device_index < 0 || device_index >= n)
    fail("cuda:{} does not exist: this machine has {} CUDA device{} (cuda:0{})", device_index, n,
         n == 1 ? "" : "s", n == 1 ? "" : fmt::format("..cuda:{}", n - 1));
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = s;
  staging_.resize(kStagingSlots);
  for (StagingSlot& slot : staging_) {
    check_cuda(cudaHostAlloc(&slot.host, kStagingSlotBytes, cudaHostAllocDefault), "cudaHostAlloc (staging)");
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    slot.event = e;
  }
  check_cuda(cudaHostAlloc(&error_word_host_, sizeof(cuda::DeviceError), cudaHostAllocMapped),
             "cudaHostAlloc (error word)");
  std::memset(error_word_host_, 0, sizeof(cuda::DeviceError));
  check_cuda(cudaHostGetDevicePointer(&error_word_device_, error_word_host_, 0), "cudaHostGetDevicePointer");
  check_cuda(cudaHostAlloc(&read_back_host_, kReadBackSlots * kReadBackBytes, cudaHostAllocDefault),
             "cudaHostAlloc (read-back slots)");
  for (void*& event : read_back_events_) {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate (read-back)");
    event = e;
  }
  graph_.init();
  if (profile_.on()) graph_.set_enabled(false);  // the profile synchronises after every op
  timeline_ = cuda::LinkTimeline::from_env(device_, stream_);
}

CudaBackend::~CudaBackend() {
  (void)cudaSetDevice(device_);
  if (stream_) (void)cudaStreamSynchronize(as_stream(stream_));
  timeline_.reset();  // writes its file
  for (Scratch* s : {&act_scratch_, &ffn_scratch_, &desc_scratch_, &attn_scratch_, &routed_scratch_,
                     &route_counter_, &host_v_scratch_})
    if (s->ptr) (void)cudaFree(s->ptr);
  if (host_io_) (void)cudaFreeHost(host_io_);
  if (host_in_event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(host_in_event_));
  for (StagingSlot& slot : staging_) {
    if (slot.event) (void)cudaEventDestroy(static_cast<cudaEvent_t>(slot.event));
    if (slot.host) (void)cudaFreeHost(slot.host);
  }
  if (error_word_host_) (void)cudaFreeHost(error_word_host_);
  for (void* event : read_back_events_)
    if (event) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
  if (read_back_host_) (void)cudaFreeHost(read_back_host_);
  if (stream_) (void)cudaStreamDestroy(as_stream(stream_));
}

void* CudaBackend::raw_alloc(size_t bytes, const char* what) {
  const size_t rounded = (bytes + kAllocGranule - 1) / kAllocGranule * kAllocGranule;
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, rounded);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    fail("cuda backend: out of GPU memory: {} bytes for {} asked, {} free of {} on {}", bytes, what, free_b,
         total_b, name_);
  }
  check_cuda(err, "cudaMalloc");
  ++generation_;
  check_cuda(cudaMemsetAsync(p, 0, rounded, as_stream(stream_)), "cudaMemsetAsync (zeroing an allocation)");
  in_use_ += rounded;
  peak_ = std::max(peak_, in_use_);
  return p;
}

void CudaBackend::raw_free(void* p, size_t bytes) noexcept {
  if (!p) return;
  (void)cudaFree(p);  // waits for the work queued on the device
  ++generation_;
  in_use_ -= std::min(in_use_, (bytes + kAllocGranule - 1) / kAllocGranule * kAllocGranule);
}

DeviceBuffer CudaBackend::alloc(size_t bytes, const char* what) {
  if (bytes == 0) return {};
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  return BufferAccess::adopt(this, raw_alloc(bytes, what), bytes);
}

void CudaBackend::free_memory(void* data, size_t bytes) noexcept {
  (void)cudaSetDevice(device_);
  raw_free(data, bytes);
}

void* CudaBackend::grow(Scratch& s, size_t bytes, const char* what) {
  if (bytes == 0 || (s.bytes >= bytes && s.ptr)) return s.ptr;
  graph_.unreplayable("a scratch reallocation");
  const size_t want = std::max(bytes, s.bytes + s.bytes / 2);
  if (s.ptr) {
    check_cuda(cudaStreamSynchronize(as_stream(stream_)), "cudaStreamSynchronize");
    raw_free(s.ptr, s.bytes);
    s.ptr = nullptr;
    s.bytes = 0;
  }
  s.ptr = raw_alloc(want, what);
  s.bytes = want;
  return s.ptr;
}

namespace {
// DF_CUDA_PARAM_UPLOADS=0 sends small uploads through the staging ring as before (for measurements).
bool param_uploads() {
  static const bool on = [] {
    const char* v = std::getenv("DF_CUDA_PARAM_UPLOADS");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}
}  // namespace

void CudaBackend::stage_to_device(void* dst, const void* src, size_t bytes) {
  note_op();
  if (bytes == 0) return;
  if (graph_.mode() == cuda::StepGraphs::Mode::Capture) {
    // The captured copy runs at every replay: it reads bytes the graph keeps, not a reused staging slot.
    check_cuda(cudaMemcpyAsync(dst, graph_.keep_host_bytes(src, bytes), bytes, cudaMemcpyHostToDevice,
                               as_stream(stream_)),
               "cudaMemcpyAsync (captured upload)");
    return;
  }
  if (bytes <= cuda::kParamBytes && param_uploads()) {
    // A few hundred bytes (the tier's expert->slot map row, task tables): as a kernel's parameters, so that
    // the upload does not wait behind expert records on the copy engine.
    cuda::launch_write_bytes(dst, src, bytes, as_stream(stream_));
    return;
  }
  if (bytes > kStagingSlotBytes) {
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(stream_)),
               "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(as_stream(stream_)), "cudaStreamSynchronize");
    return;
  }
  StagingSlot& slot = staging_[next_slot_];
  next_slot_ = (next_slot_ + 1) % staging_.size();
  // The slot's previous copy must have left it (it was queued kStagingSlots copies ago).
  if (slot.used)
    check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(slot.event)), "cudaEventSynchronize");
  std::memcpy(slot.host, src, bytes);
  check_cuda(cudaMemcpyAsync(dst, slot.host, bytes, cudaMemcpyHostToDevice, as_stream(stream_)),
             "cudaMemcpyAsync (staged upload)");
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(slot.event), as_stream(stream_)), "cudaEventRecord");
  slot.used = true;
}

void CudaBackend::check_error_word() {
  // Read after a synchronisation: the kernels' writes to the mapped memory are visible by then.
  auto* e = static_cast<volatile cuda::DeviceError*>(error_word_host_);
  const cuda::DeviceError seen{e->code, e->value, e->limit};
  if (seen.code == cuda::kErrNone) return;
  std::memset(error_word_host_, 0, sizeof(cuda::DeviceError));
  switch (seen.code) {
    case cuda::kErrGetRowsId:
      fail("token id {} is out of range (vocabulary of {}) (found by the cuda backend's get_rows)",
           seen.value, seen.limit);
    case cuda::kErrFfnInRow:
      fail("ffn: a task reads input row {} of {} (found by the cuda backend)", seen.value, seen.limit);
    case cuda::kErrFfnOutRow:
      fail("ffn: a task writes output row {}, outside the output of {} rows (found by the cuda backend)",
           seen.value, seen.limit);
    case cuda::kErrExpertId:
      fail("routed ffn: expert id {} is out of range ({} experts) (found by the cuda backend)", seen.value,
           seen.limit);
    default:
      fail("cuda backend: a kernel reported error {} (value {}, limit {})", seen.code, seen.value,
           seen.limit);
  }
}

void CudaBackend::synchronize() {
  check_cuda(cudaStreamSynchronize(as_stream(stream_)), "cudaStreamSynchronize");
  check_error_word();
}

// Up to kMatvecMaxRows rows every product and grouped FFN runs its matrix-vector kernels, row by row as a
// batch of one (test_models_cuda_sequences shows decode batches of 3 sequences bit-identical to each alone);
// above it the tensor-core tiles sum in another order.
int64_t CudaBackend::batch_invariant_rows() const { return cuda::kMatvecMaxRows; }

void CudaBackend::begin_step(uint64_t key) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  if (timeline_) timeline_->mark("step", nullptr);
  graph_.begin(key, generation_, stream_);
}

void CudaBackend::end_step() {
  // Where the device reaches the step's graph (or the end of its eager launches): with the download's mark,
  // the device's busy time of a step and the host's gap between two steps.
  if (timeline_) timeline_->mark("graph", stream_);
  graph_.end(generation_, stream_);
  if (timeline_) timeline_->mark("step_end", nullptr);
}

void CudaBackend::cancel_step() noexcept { graph_.cancel(stream_); }

void CudaBackend::upload(Buf<uint8_t> dst, const void* src, size_t bytes) {
  const auto timer = timed({"upload"});
  note_op();
  graph_.unreplayable("an upload");
  if (bytes > dst.size())
    fail("cuda backend: upload of {} bytes into a buffer view of {}", bytes, dst.size());
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  // Stream-ordered: every later op sees the bytes, and `src` may be reused on return (it was copied into a
  // pinned staging slot, or the copy was waited for).
  stage_to_device(BufferAccess::raw(dst), src, bytes);
}

void CudaBackend::download(void* dst, Buf<const uint8_t> src, size_t bytes) {
  const auto timer = timed({"download"});
  graph_.unreplayable("a download");
  if (bytes > src.size())
    fail("cuda backend: download of {} bytes from a buffer view of {}", bytes, src.size());
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  if (timeline_) timeline_->mark("download", stream_);
  if (bytes > 0)
    check_cuda(
        cudaMemcpyAsync(dst, BufferAccess::raw(src), bytes, cudaMemcpyDeviceToHost, as_stream(stream_)),
        "cudaMemcpyAsync (download)");
  synchronize();
  if (timeline_) timeline_->mark("downloaded", nullptr);
}

void CudaBackend::queue_read_back(int slot, Buf<const uint8_t> src, size_t bytes) {
  check_read_back(slot, bytes);
  graph_.unreplayable("a read-back");
  if (bytes > src.size())
    fail("cuda backend: read-back of {} bytes from a buffer view of {}", bytes, src.size());
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  if (timeline_) timeline_->mark("download", stream_);
  auto* dst = static_cast<uint8_t*>(read_back_host_) + static_cast<size_t>(slot) * kReadBackBytes;
  if (bytes > 0)
    check_cuda(
        cudaMemcpyAsync(dst, BufferAccess::raw(src), bytes, cudaMemcpyDeviceToHost, as_stream(stream_)),
        "cudaMemcpyAsync (read-back)");
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(read_back_events_[static_cast<size_t>(slot)]),
                             as_stream(stream_)),
             "cudaEventRecord (read-back)");
}

void CudaBackend::read_back(int slot, void* dst, size_t bytes) {
  check_read_back(slot, bytes);
  check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(read_back_events_[static_cast<size_t>(slot)])),
             "cudaEventSynchronize (read-back)");
  if (timeline_) timeline_->mark("downloaded", nullptr);
  // The kernels before the copy wrote their failures (if any) to the mapped error word by now.
  check_error_word();
  if (bytes)
    std::memcpy(dst,
                static_cast<const uint8_t*>(read_back_host_) + static_cast<size_t>(slot) * kReadBackBytes,
                bytes);
}

void CudaBackend::copy(Buf<uint8_t> dst, Buf<const uint8_t> src, size_t bytes) {
  if (bytes > dst.size() || bytes > src.size())
    fail("cuda backend: copy of {} bytes between buffer views of {} and {}", bytes, src.size(), dst.size());
  if (bytes == 0 || skip_op("copy", BufferAccess::raw(dst), static_cast<int64_t>(bytes), 0)) return;
  check_cuda(cudaMemcpyAsync(BufferAccess::raw(dst), BufferAccess::raw(src), bytes, cudaMemcpyDeviceToDevice,
                             as_stream(stream_)),
             "cudaMemcpyAsync (device copy)");
}

void CudaBackend::fill_zero(Buf<uint8_t> dst, size_t bytes) {
  if (bytes > dst.size())
    fail("cuda backend: fill_zero of {} bytes in a buffer view of {}", bytes, dst.size());
  if (bytes == 0 || skip_op("fill_zero", BufferAccess::raw(dst), static_cast<int64_t>(bytes), 0)) return;
  check_cuda(cudaMemsetAsync(BufferAccess::raw(dst), 0, bytes, as_stream(stream_)), "cudaMemsetAsync");
}

quant::RowPacking CudaBackend::preferred_packing(GgmlType, int64_t) const { return quant::RowPacking::kNone; }

std::unique_ptr<RecordSlots> CudaBackend::make_record_slots(int n_slots, size_t record_bytes) {
  return std::make_unique<CudaRecordSlots>(*this, n_slots, record_bytes);
}

namespace {

// Host memory page-locked by the backends of this process, with how many registered it: the RAM tier of a
// layer split is one pool that the tier of every GPU copies from, locked once (portable: every device sees
// it locked) and unlocked when the last one lets go.
struct HostRegistry {
  std::mutex mu;
  std::map<void*, int> users;
};
HostRegistry& host_registry() {
  static HostRegistry r;
  return r;
}

}  // namespace

void CudaBackend::register_host_memory(void* data, size_t bytes) {
  if (!data || bytes == 0) return;
  HostRegistry& reg = host_registry();
  std::lock_guard lock(reg.mu);
  if (auto it = reg.users.find(data); it != reg.users.end()) {
    ++it->second;
    return;
  }
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  const cudaError_t err = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail(
        "cuda backend: cannot page-lock {} bytes of host memory for the RAM tier of the expert cache "
        "(cudaHostRegister: {}); a smaller "
        "--ram-cache may fit",
        bytes, cudaGetErrorString(err));
  }
  reg.users[data] = 1;
}

void CudaBackend::unregister_host_memory(void* data) noexcept {
  if (!data) return;
  HostRegistry& reg = host_registry();
  std::lock_guard lock(reg.mu);
  auto it = reg.users.find(data);
  if (it == reg.users.end()) return;
  if (--it->second > 0) return;
  reg.users.erase(it);
  (void)cudaSetDevice(device_);
  (void)cudaHostUnregister(data);
}

std::optional<uint64_t> CudaBackend::free_device_bytes() const {
  size_t free_b = 0, total_b = 0;
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  return free_b;
}

UploadedWeights CudaBackend::upload_weights(const WeightSource& src) {
  note_op();
  const auto& tr = ggml_traits(src.type);
  if (src.n_in <= 0 || src.n_in % tr.block_size != 0 || src.n_out < 0 || src.n_matrices < 1)
    fail("cuda backend: cannot upload {} weights of {} x {} x {} (rows must be whole {}-value blocks)",
         ggml_type_name(src.type), src.n_matrices, src.n_out, src.n_in, tr.block_size);
  const size_t slab = ggml_row_bytes(src.type, src.n_in) * static_cast<size_t>(src.n_out);
  const size_t bytes = slab * static_cast<size_t>(src.n_matrices);
  UploadedWeights u;
  u.memory = alloc(bytes, "weights");
  if (bytes > 0) {
    if (!src.read) fail("cuda backend: upload_weights without a source of bytes");
    // The file is read into host memory of this call's own (freed on return: a model's load should not
    // leave its largest tensor resident in RAM), then copied up.
    HugePageBuffer staging(bytes, "weight upload staging");
    src.read(staging.data());
    check_cuda(cudaMemcpyAsync(BufferAccess::data(u.memory), staging.data(), bytes, cudaMemcpyHostToDevice,
                               as_stream(stream_)),
               "cudaMemcpyAsync (weights)");
    check_cuda(cudaStreamSynchronize(as_stream(stream_)), "cudaStreamSynchronize");
  }
  u.first = Weight{src.type, BufferAccess::data(u.memory), src.n_in, src.n_out, quant::RowPacking::kNone};
  u.slab_bytes = slab;
  return u;
}

uint8_t* CudaBackend::quantized_output(const float* x, int64_t rows, int64_t n) {
  auto* q = static_cast<uint8_t*>(grow(quantized_rows_scratch_,
                                       cuda::act_row_stride(GgmlType::Q8_0, n) * static_cast<size_t>(rows),
                                       "quantized rows"));
  quantized_rows_ = {x, rows, n, q, op_seq_};
  return q;
}

const uint8_t* CudaBackend::quantized_input(const float* x, int64_t rows, int64_t n) {
  const QuantizedRows& r = quantized_rows_;
  if (!r.q || r.op + 1 != op_seq_ || r.x != x || r.rows != rows || r.n != n) return nullptr;
  ++quantized_rows_taken_;
  return r.q;
}

}  // namespace df::backend

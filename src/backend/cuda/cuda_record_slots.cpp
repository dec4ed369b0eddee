#include "backend/cuda/cuda_record_slots.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "util/error.h"

namespace df::backend {
namespace {

cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

void* new_event() {
  cudaEvent_t e = nullptr;
  cuda::check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}

}  // namespace

CudaRecordSlots::CudaRecordSlots(CudaBackend& backend, int n_slots, size_t record_bytes)
    : backend_(backend), n_slots_(n_slots), record_bytes_(record_bytes) {
  if (n_slots < 1 || record_bytes == 0)
    fail("cuda record slots: {} slots of {} bytes is no pool", n_slots, record_bytes);
  cuda::check_cuda(cudaSetDevice(backend_.device_index()), "cudaSetDevice");
  memory_ =
      backend_.raw_alloc(static_cast<size_t>(n_slots) * record_bytes, "expert record slots (VRAM tier)");
  // The allocation is zeroed on the compute stream; the copy stream must not overtake that.
  cuda::check_cuda(cudaStreamSynchronize(as_stream(backend_.stream_)), "cudaStreamSynchronize");
  for (void** stream : {&copy_stream_, &unpack_stream_}) {
    cudaStream_t s = nullptr;
    cuda::check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    *stream = s;
  }
  for (auto* events : {&copied_, &host_read_, &retired_}) {
    events->resize(static_cast<size_t>(n_slots));
    for (auto& e : *events) e = new_event();
  }
  retire_recorded_.assign(static_cast<size_t>(n_slots), 0);
  host_pending_.assign(static_cast<size_t>(n_slots), 0);
  unwaited_.assign(static_cast<size_t>(n_slots), 0);
  filled_.assign(static_cast<size_t>(n_slots), 0);
  for (Staging& st : staging_) {
    st.memory = backend_.raw_alloc(record_bytes, "expert record staging (VRAM tier)");
    st.filled = new_event();
    st.free = new_event();
  }
  cuda::check_cuda(cudaStreamSynchronize(as_stream(backend_.stream_)), "cudaStreamSynchronize");
  timeline_ = backend_.timeline_.get();
}

CudaRecordSlots::~CudaRecordSlots() {
  (void)cudaSetDevice(backend_.device_index());
  if (timeline_) timeline_->write();  // once, with what the slots' streams recorded
  for (void* stream : {copy_stream_, unpack_stream_})
    if (stream) (void)cudaStreamSynchronize(as_stream(stream));
  (void)cudaStreamSynchronize(as_stream(backend_.stream_));
  for (const auto* events : {&copied_, &host_read_, &retired_})
    for (void* e : *events) (void)cudaEventDestroy(as_event(e));
  for (Staging& st : staging_) {
    for (void* e : {st.filled, st.free})
      if (e) (void)cudaEventDestroy(as_event(e));
    backend_.raw_free(st.memory, record_bytes_);
  }
  for (void* stream : {copy_stream_, unpack_stream_})
    if (stream) (void)cudaStreamDestroy(as_stream(stream));
  backend_.raw_free(memory_, static_cast<size_t>(n_slots_) * record_bytes_);
}

void CudaRecordSlots::check_slot(int slot, const char* what) const {
  if (slot < 0 || slot >= n_slots_)
    fail("cuda record slots {}: slot {} out of range ({} slots)", what, slot, n_slots_);
}

const void* CudaRecordSlots::part(int slot, size_t offset) const {
  check_slot(slot, "part");
  if (offset >= record_bytes_)
    fail("cuda record slots part: offset {} past a record of {} bytes", offset, record_bytes_);
  return static_cast<const uint8_t*>(memory_) + static_cast<size_t>(slot) * record_bytes_ + offset;
}

void CudaRecordSlots::fill(int slot, const uint8_t* host_record, std::span<const RecordPart> parts) {
  check_slot(slot, "fill");
  backend_.graph_.unreplayable("an expert record copy");
  cuda::check_cuda(cudaSetDevice(backend_.device_index()), "cudaSetDevice");
  bool convert = false;
  for (const RecordPart& p : parts) {
    if (p.offset + p.bytes() > record_bytes_)
      fail("cuda record slots fill: a part of {} bytes at {} overruns a record of {} bytes", p.bytes(),
           p.offset, record_bytes_);
    const quant::RowPacking want = backend_.preferred_packing(p.type, p.n_out);
    if (p.packing == want) continue;
    convert = true;
    // Checked before anything is queued: a fill is never left half done.
    if (p.type != GgmlType::Q4_0 || p.packing != quant::RowPacking::kQ4_0x16 ||
        want != quant::RowPacking::kNone)
      fail("cuda record slots fill: no conversion of a {} part from packing {} to {}", ggml_type_name(p.type),
           quant::row_packing_name(p.packing), quant::row_packing_name(want));
    if (p.offset % 4 != 0)
      fail("cuda record slots fill: a Q4_0x16 part at offset {} is not 4-byte aligned", p.offset);
  }
  const size_t s = static_cast<size_t>(slot);
  cudaStream_t copy = as_stream(copy_stream_);
  uint8_t* dst = static_cast<uint8_t*>(memory_) + s * record_bytes_;
  // The slot's writes wait for the reads of its old bytes, and for its previous fill (which may have
  // written it on the other stream, and not been used before its eviction).
  const auto wait_slot_free = [&](cudaStream_t writer) {
    if (retire_recorded_[s])
      cuda::check_cuda(cudaStreamWaitEvent(writer, as_event(retired_[s]), 0),
                       "cudaStreamWaitEvent (retired)");
    if (filled_[s])
      cuda::check_cuda(cudaStreamWaitEvent(writer, as_event(copied_[s]), 0), "cudaStreamWaitEvent (refill)");
  };
  if (!convert) {
    wait_slot_free(copy);
    if (timeline_) timeline_->copy_queued(copy);
    cuda::check_cuda(cudaMemcpyAsync(dst, host_record, record_bytes_, cudaMemcpyHostToDevice, copy),
                     "cudaMemcpyAsync (expert record to VRAM)");
    if (timeline_) {
      timeline_->copied(copy, slot);
      timeline_->slot_written(copy);
    }
    cuda::check_cuda(cudaEventRecord(as_event(host_read_[s]), copy), "cudaEventRecord (host read)");
    cuda::check_cuda(cudaEventRecord(as_event(copied_[s]), copy), "cudaEventRecord (copied)");
  } else {
    // The record goes up into a staging record while the unpack stream converts the one before it out of
    // the other: the link never waits for a conversion.
    Staging& st = staging_[next_staging_];
    next_staging_ = (next_staging_ + 1) % staging_.size();
    if (st.used)
      cuda::check_cuda(cudaStreamWaitEvent(copy, as_event(st.free), 0), "cudaStreamWaitEvent (staging free)");
    auto* staged = static_cast<uint8_t*>(st.memory);
    if (timeline_) timeline_->copy_queued(copy);
    cuda::check_cuda(cudaMemcpyAsync(staged, host_record, record_bytes_, cudaMemcpyHostToDevice, copy),
                     "cudaMemcpyAsync (expert record to VRAM staging)");
    if (timeline_) timeline_->copied(copy, slot);
    cuda::check_cuda(cudaEventRecord(as_event(host_read_[s]), copy), "cudaEventRecord (host read)");
    cuda::check_cuda(cudaEventRecord(as_event(st.filled), copy), "cudaEventRecord (staging filled)");
    cudaStream_t unpack = as_stream(unpack_stream_);
    cuda::check_cuda(cudaStreamWaitEvent(unpack, as_event(st.filled), 0), "cudaStreamWaitEvent (staged)");
    wait_slot_free(unpack);
    for (const RecordPart& p : parts) {
      const quant::RowPacking want = backend_.preferred_packing(p.type, p.n_out);
      if (p.packing == want)
        cuda::check_cuda(
            cudaMemcpyAsync(dst + p.offset, staged + p.offset, p.bytes(), cudaMemcpyDeviceToDevice, unpack),
            "cudaMemcpyAsync (expert record part)");
      else  // Q4_0x16 -> Q4_0 rows, the one conversion the check above lets through
        cuda::launch_unpack_q4_0x16(staged + p.offset, p.n_out, p.n_in, dst + p.offset, unpack);
    }
    cuda::check_cuda(cudaEventRecord(as_event(st.free), unpack), "cudaEventRecord (staging free)");
    if (timeline_) timeline_->slot_written(unpack);
    st.used = true;
    cuda::check_cuda(cudaEventRecord(as_event(copied_[s]), unpack), "cudaEventRecord (copied)");
  }
  host_pending_[s] = 1;
  unwaited_[s] = 1;
  filled_[s] = 1;
}

void CudaRecordSlots::use(int slot) {
  check_slot(slot, "use");
  const size_t s = static_cast<size_t>(slot);
  if (!unwaited_[s]) return;
  backend_.graph_.unreplayable("an expert record copy");
  cuda::check_cuda(cudaSetDevice(backend_.device_index()), "cudaSetDevice");
  if (timeline_) timeline_->waits(backend_.stream_, slot);
  cuda::check_cuda(cudaStreamWaitEvent(as_stream(backend_.stream_), as_event(copied_[s]), 0),
                   "cudaStreamWaitEvent (copied)");
  unwaited_[s] = 0;
}

bool CudaRecordSlots::host_done(int slot) {
  check_slot(slot, "host_done");
  const size_t s = static_cast<size_t>(slot);
  if (!host_pending_[s]) return true;
  const cudaError_t err = cudaEventQuery(as_event(host_read_[s]));
  if (err == cudaErrorNotReady) return false;
  cuda::check_cuda(err, "cudaEventQuery (expert record copy)");
  host_pending_[s] = 0;
  return true;
}

void CudaRecordSlots::wait_host_done(int slot) {
  check_slot(slot, "wait_host_done");
  const size_t s = static_cast<size_t>(slot);
  if (!host_pending_[s]) return;
  cuda::check_cuda(cudaEventSynchronize(as_event(host_read_[s])),
                   "cudaEventSynchronize (expert record copy)");
  host_pending_[s] = 0;
}

void CudaRecordSlots::retire(int slot) {
  check_slot(slot, "retire");
  backend_.graph_.unreplayable("an expert slot release");
  const size_t s = static_cast<size_t>(slot);
  cuda::check_cuda(cudaEventRecord(as_event(retired_[s]), as_stream(backend_.stream_)),
                   "cudaEventRecord (retired)");
  retire_recorded_[s] = 1;
}

std::string CudaRecordSlots::describe() const {
  return fmt::format("{} slots x {:.2f} MiB = {:.2f} GiB of VRAM", n_slots_,
                     static_cast<double>(record_bytes_) / 1048576.0,
                     static_cast<double>(record_bytes_) * n_slots_ / 1073741824.0);
}

}  // namespace df::backend

#pragma once
// The CUDA backend's record slots (backend/record_slots.h): one VRAM pool, filled by copies on a copy stream
// of their own, so that a record travels over PCIe while the compute stream runs. The compute stream waits
// for a slot's copy on the device (an event) when the slot is used, never on the host, and not at the fill:
// a copy of a guessed record overlaps the compute issued before its use. A fill's writes to a slot wait, on
// the device, for the ops that read the slot's old bytes (retire). A record with parts the store keeps in
// another packing than the GPU reads (Q4_0x16) goes up as it is into one of two VRAM staging records and is
// unpacked from there into its slot by a kernel on a stream of its own, so that the next record's copy
// overlaps the unpacking (on the host the unpacking cost ~1.6 ms a record, more than the copy).
#include <array>
#include <vector>

#include "backend/record_slots.h"

namespace df::backend {
namespace cuda {
class LinkTimeline;
}

class CudaBackend;

class CudaRecordSlots final : public RecordSlots {
 public:
  CudaRecordSlots(CudaBackend& backend, int n_slots, size_t record_bytes);
  ~CudaRecordSlots() override;
  CudaRecordSlots(const CudaRecordSlots&) = delete;
  CudaRecordSlots& operator=(const CudaRecordSlots&) = delete;

  int slots() const override { return n_slots_; }
  size_t slot_bytes() const override { return record_bytes_; }
  const void* part(int slot, size_t offset) const override;
  void fill(int slot, const uint8_t* host_record, std::span<const RecordPart> parts) override;
  void use(int slot) override;
  bool host_done(int slot) override;
  void wait_host_done(int slot) override;
  void retire(int slot) override;
  std::string describe() const override;

 private:
  void check_slot(int slot, const char* what) const;
  CudaBackend& backend_;
  int n_slots_;
  size_t record_bytes_;
  void* memory_ = nullptr;         // device
  void* copy_stream_ = nullptr;    // cudaStream_t: host-to-device copies
  void* unpack_stream_ = nullptr;  // cudaStream_t: staging records converted into their slots
  std::vector<void*> copied_;      // per slot: cudaEvent_t after its fill's last write to the slot
  std::vector<void*> host_read_;   // per slot: cudaEvent_t after its fill's read of the host bytes
  std::vector<void*> retired_;     // per slot: cudaEvent_t recorded on the compute stream by retire()
  std::vector<uint8_t> retire_recorded_;
  std::vector<uint8_t> host_pending_;  // per slot: the fill still reads the caller's host bytes
  std::vector<uint8_t> unwaited_;      // per slot: compute has not yet been ordered after its last fill
  std::vector<uint8_t> filled_;        // per slot: copied_ has been recorded
  // Two records of VRAM for records whose parts need converting: one takes a copy while the other's
  // conversion runs.
  struct Staging {
    void* memory = nullptr;
    void* filled = nullptr;  // cudaEvent_t: its copy up is done
    void* free = nullptr;    // cudaEvent_t: its conversion is done
    bool used = false;
  };
  std::array<Staging, 2> staging_{};
  size_t next_staging_ = 0;
  cuda::LinkTimeline* timeline_ = nullptr;  // the backend's (DF_CUDA_LINK_TIMELINE), or null
};

}  // namespace df::backend

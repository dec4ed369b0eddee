#pragma once
// The CPU backend's record slots (backend/record_slots.h): host memory, filled by a conversion copy that is
// done when fill() returns. On the CPU the RAM tier's slots could be read in place; these exist so that the
// tier chain (stream/tiered_expert_provider.h) runs, and is tested, on machines without a GPU.
#include "backend/record_slots.h"
#include "util/huge_page_buffer.h"

namespace df::backend {

class HostRecordSlots final : public RecordSlots {
 public:
  // `packing_of` is the backend's preferred packing (a part is converted to it on the way in).
  HostRecordSlots(int n_slots, size_t record_bytes, quant::RowPacking (*packing_of)(GgmlType, int64_t));

  int slots() const override { return n_slots_; }
  size_t slot_bytes() const override { return record_bytes_; }
  const void* part(int slot, size_t offset) const override;
  void fill(int slot, const uint8_t* host_record, std::span<const RecordPart> parts) override;
  void use(int) override {}  // fill() has copied
  bool host_done(int) override { return true; }
  void wait_host_done(int) override {}
  void retire(int) override {}
  std::string describe() const override;

 private:
  void check_slot(int slot, const char* what) const;
  int n_slots_;
  size_t record_bytes_;
  quant::RowPacking (*packing_of_)(GgmlType, int64_t);
  HugePageBuffer memory_;
};

}  // namespace df::backend

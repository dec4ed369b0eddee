#include "backend/cpu/host_record_slots.h"

#include <fmt/format.h>

#include "util/error.h"

namespace df::backend {

HostRecordSlots::HostRecordSlots(int n_slots, size_t record_bytes,
                                 quant::RowPacking (*packing_of)(GgmlType, int64_t))
    : n_slots_(n_slots), record_bytes_(record_bytes), packing_of_(packing_of) {
  if (n_slots < 1 || record_bytes == 0)
    fail("record slots: {} slots of {} bytes is no pool", n_slots, record_bytes);
  memory_ = HugePageBuffer(static_cast<size_t>(n_slots) * record_bytes, "expert record slots");
}

void HostRecordSlots::check_slot(int slot, const char* what) const {
  if (slot < 0 || slot >= n_slots_)
    fail("record slots {}: slot {} out of range ({} slots)", what, slot, n_slots_);
}

const void* HostRecordSlots::part(int slot, size_t offset) const {
  check_slot(slot, "part");
  if (offset >= record_bytes_)
    fail("record slots part: offset {} past a record of {} bytes", offset, record_bytes_);
  return memory_.data() + static_cast<size_t>(slot) * record_bytes_ + offset;
}

void HostRecordSlots::fill(int slot, const uint8_t* host_record, std::span<const RecordPart> parts) {
  check_slot(slot, "fill");
  uint8_t* dst = memory_.data() + static_cast<size_t>(slot) * record_bytes_;
  for (const RecordPart& p : parts) {
    if (p.offset + p.bytes() > record_bytes_)
      fail("record slots fill: a part of {} bytes at {} overruns a record of {} bytes", p.bytes(), p.offset,
           record_bytes_);
    quant::convert_packing(host_record + p.offset, p.type, p.n_out, p.n_in, p.packing,
                           packing_of_(p.type, p.n_out), dst + p.offset);
  }
}

std::string HostRecordSlots::describe() const {
  return fmt::format("{} slots x {:.2f} MiB = {:.2f} MiB of host memory", n_slots_,
                     static_cast<double>(record_bytes_) / 1048576.0,
                     static_cast<double>(memory_.size()) / 1048576.0);
}

}  // namespace df::backend

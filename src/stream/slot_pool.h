#pragma once
// The memory of every cache slot: one page-aligned mapping made once (O_DIRECT and registered buffers need
// the alignment; it is 2 MiB-aligned with huge pages asked for, see util/huge_page_buffer.h), touched only as
// slots fill, returned to the OS at destruction.
#include <cstddef>
#include <cstdint>

#include "util/huge_page_buffer.h"

namespace df::stream {

class SlotPool {
 public:
  SlotPool(uint64_t n_slots, uint64_t slot_bytes);  // throws df::Error when the memory cannot be had
  ~SlotPool();
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  uint8_t* slot(uint64_t i) const { return base_ + i * slot_bytes_; }
  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }

 private:
  HugePageBuffer memory_;
  uint8_t* base_ = nullptr;
  uint64_t slot_bytes_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace df::stream

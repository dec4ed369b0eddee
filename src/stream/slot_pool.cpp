#include "stream/slot_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "stream/byte_size.h"
#include "util/error.h"

namespace df::stream {

SlotPool::SlotPool(uint64_t n_slots, uint64_t slot_bytes)
    : slot_bytes_(slot_bytes), bytes_(n_slots * slot_bytes) {
  try {
    memory_ = HugePageBuffer(bytes_, "expert cache");
  } catch (const Error& e) {
    fail("expert cache: cannot allocate {} for {} slots of {}: {}", format_bytes(bytes_), n_slots,
         format_bytes(slot_bytes), e.what());
  }
  base_ = memory_.data();
}

SlotPool::~SlotPool() = default;

}  // namespace df::stream

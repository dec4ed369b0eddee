#include "stream/slot_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "stream/byte_size.h"
#include "util/error.h"

namespace df::stream {

SlotPool::SlotPool(uint64_t n_slots, uint64_t slot_bytes)
    : slot_bytes_(slot_bytes), bytes_(n_slots * slot_bytes) {
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail("expert cache: cannot allocate {} for {} slots of {}: {}", format_bytes(bytes_), n_slots,
         format_bytes(slot_bytes), std::strerror(errno));
  base_ = static_cast<uint8_t*>(p);
}

SlotPool::~SlotPool() {
  if (base_) ::munmap(base_, bytes_);
}

}  // namespace df::stream

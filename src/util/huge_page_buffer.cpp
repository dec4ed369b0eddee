#include "util/huge_page_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "util/error.h"

namespace df {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

HugePageBuffer::HugePageBuffer(size_t bytes, const char* what) {
  if (bytes == 0) return;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t length = round_up(bytes, page);
  // Below one huge page there is nothing to align: a plain mapping.
  const size_t reserve = length >= kHugePage ? length + kHugePage : length;
  void* p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot allocate {} bytes for the {}: {}", bytes, what, std::strerror(errno));
  auto* base = static_cast<uint8_t*>(p);
  uint8_t* start = base;
  if (reserve > length) {
    // Keep the 2 MiB-aligned `length` bytes inside the reservation, give the rest back.
    start = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(base), kHugePage));
    const size_t head = static_cast<size_t>(start - base);
    const size_t tail = reserve - head - length;
    if (head > 0) ::munmap(base, head);
    if (tail > 0) ::munmap(start + length, tail);
    // Advice only: without transparent huge pages the memory works the same on small pages.
    ::madvise(start, length, MADV_HUGEPAGE);
  }
  data_ = start;
  size_ = bytes;
  mapped_ = length;
}

HugePageBuffer::~HugePageBuffer() { release(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

uint8_t* HugePageBuffer::release_ownership() {
  size_ = mapped_ = 0;
  return std::exchange(data_, nullptr);
}

void HugePageBuffer::unmap(void* data, size_t bytes) noexcept {
  if (data) ::munmap(data, round_up(bytes, static_cast<size_t>(::sysconf(_SC_PAGESIZE))));
}

void HugePageBuffer::release() {
  if (data_) ::munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
}

}  // namespace df

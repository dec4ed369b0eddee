#pragma once
// Memory for large arrays that are streamed through again and again (weights, the expert cache's slots):
// an anonymous mapping whose start is 2 MiB-aligned, with MADV_HUGEPAGE asked for, so that on kernels with
// transparent huge pages in "madvise" mode (Debian's default) the bytes sit on 2 MiB pages. Measured on the
// dev VM (docs/PERF.md): a Q4_0x16 matrix-vector product streaming from DRAM went from 12-13 to 23-25 GB/s
// with one thread, from 27.5 to 31.5 GB/s with two. The mapping is exactly `bytes` long (rounded up to 4 KiB
// pages): a partly used last 2 MiB stays on small pages, so nothing beyond the size asked for is ever
// resident. Fresh memory reads as zeros.
#include <cstddef>
#include <cstdint>

namespace df {

class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  // Throws df::Error (naming `what` and the size) when the memory cannot be mapped.
  explicit HugePageBuffer(size_t bytes, const char* what = "buffer");
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Hands the mapping over to the caller, who frees it with unmap(data, size()) (a backend's allocator keeps
  // only the address and size).
  uint8_t* release_ownership();
  static void unmap(void* data, size_t bytes) noexcept;

 private:
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
};

}  // namespace df

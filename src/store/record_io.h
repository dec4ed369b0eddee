#pragma once
// Reading expert records back: the pread path of the runtime (the streaming cache's fallback when io_uring is
// not available) and of `diskformer verify`. Every failure names the file, the MoE layer (and its model
// layer), the expert and the byte range, so a bad sector or a truncated file points at the record that
// suffers.
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "store/store.h"

namespace df::store {

// pread(2) or a stand-in; tests inject EIO, short reads and early end of file through it.
using PreadFn = std::function<ssize_t(int fd, void* buf, size_t n, off_t offset)>;

// Reads exactly n bytes at `offset`, retrying EINTR and short reads. Throws df::Error
// "<path>: read error in <what> at offset X: <strerror>" or "<path> ends at byte X, inside <what>: ...".
void pread_exact(int fd, const std::string& path, uint64_t offset, uint64_t n, void* dst,
                 std::string_view what, const PreadFn& pread_fn = {});

// "the record of MoE layer 2 (blk.4), expert 7, bytes [a, b)"
std::string describe_record(const Layout& layout, int moe_layer, int expert);

// One record into dst (record_bytes bytes; aligned to 4096 when fd was opened with O_DIRECT). Throws
// df::Error for an out-of-range layer or expert and for any read failure.
void read_record(int fd, const std::string& path, const Layout& layout, int moe_layer, int expert, void* dst,
                 const PreadFn& pread_fn = {});

uint64_t record_xxh3(const void* record, uint64_t bytes);

// Throws df::Error naming the store, record and both checksums when the bytes differ from the manifest's.
void verify_record(const Store& store, int moe_layer, int expert, const void* record);

// experts.bin of an opened store, read with pread. `store` must outlive the reader.
class RecordReader {
 public:
  explicit RecordReader(const Store& store, bool verify_checksums = true, PreadFn pread_fn = {});
  ~RecordReader();
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;

  void read(int moe_layer, int expert, void* dst) const;
  int fd() const { return fd_; }

 private:
  const Store& store_;
  bool verify_;
  PreadFn pread_;
  int fd_ = -1;
};

}  // namespace df::store

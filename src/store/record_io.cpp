#include "store/record_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace df::store {

void pread_exact(int fd, const std::string& path, uint64_t offset, uint64_t n, void* dst,
                 std::string_view what, const PreadFn& pread_fn) {
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < n) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
    off_t at = static_cast<off_t>(offset + done);
    ssize_t r = pread_fn ? pread_fn(fd, out + done, chunk, at) : ::pread(fd, out + done, chunk, at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      fail("{}: read error in {} at offset {}: {} (check the disk: dmesg may say more)", path, what,
           offset + done, std::strerror(errno));
    if (r == 0)
      fail("{} ends at byte {}, inside {}: the file is truncated or was replaced while in use", path,
           offset + done, what);
    if (static_cast<uint64_t>(r) > chunk)
      fail("{}: read of {} returned {} bytes for {} asked", path, what, r, chunk);
    done += static_cast<uint64_t>(r);
  }
}

std::string describe_record(const Layout& layout, int moe_layer, int expert) {
  uint64_t begin = layout.record_offset(moe_layer, expert);
  return fmt::format("the record of MoE layer {} (blk.{}), expert {}, bytes [{}, {})", moe_layer,
                     layout.layers.at(static_cast<size_t>(moe_layer)).layer, expert, begin,
                     begin + layout.record_bytes);
}

void read_record(int fd, const std::string& path, const Layout& layout, int moe_layer, int expert, void* dst,
                 const PreadFn& pread_fn) {
  if (moe_layer < 0 || moe_layer >= layout.n_moe_layers)
    fail("{}: MoE layer {} is out of range (the store has {})", path, moe_layer, layout.n_moe_layers);
  if (expert < 0 || expert >= layout.n_expert)
    fail("{}: expert {} is out of range (the store has {} per layer)", path, expert, layout.n_expert);
  pread_exact(fd, path, layout.record_offset(moe_layer, expert), layout.record_bytes, dst,
              describe_record(layout, moe_layer, expert), pread_fn);
}

uint64_t record_xxh3(const void* record, uint64_t bytes) {
  return XXH3_64bits(record, static_cast<size_t>(bytes));
}

void verify_record(const Store& store, int moe_layer, int expert, const void* record) {
  const Layout& layout = store.layout();
  uint64_t want = store.record_checksum(moe_layer, expert);
  uint64_t got = record_xxh3(record, layout.record_bytes);
  if (got != want)
    fail("store {}: {}: {} has xxh3 {:016x}, the manifest says {:016x}: the store is damaged; re-run `{}`",
         store.dir(), kExpertsFile, describe_record(layout, moe_layer, expert), got, want,
         store.reingest_command());
}

RecordReader::RecordReader(const Store& store, bool verify_checksums, PreadFn pread_fn)
    : store_(store), verify_(verify_checksums), pread_(std::move(pread_fn)) {
  fd_ = ::open(store.experts_path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("cannot open '{}': {}", store.experts_path(), std::strerror(errno));
}

RecordReader::~RecordReader() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordReader::read(int moe_layer, int expert, void* dst) const {
  read_record(fd_, store_.experts_path(), store_.layout(), moe_layer, expert, dst, pread_);
  if (verify_) verify_record(store_, moe_layer, expert, dst);
}

}  // namespace df::store

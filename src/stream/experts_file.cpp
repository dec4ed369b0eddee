#include "stream/experts_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "stream/byte_size.h"
#include "util/error.h"

namespace df::stream {
namespace {

constexpr size_t kProbeBytes = 4096;

// Some file systems accept O_DIRECT at open() and refuse the first read instead, so one aligned read proves
// it.
bool direct_read_works(int fd, uint64_t file_bytes) {
  if (file_bytes < kProbeBytes) return true;
  void* buf = std::aligned_alloc(kProbeBytes, kProbeBytes);
  if (!buf) return true;  // cannot tell; the real reads will report what goes wrong
  const ssize_t n = ::pread(fd, buf, kProbeBytes, 0);
  const int err = errno;
  std::free(buf);
  return n >= 0 || err != EINVAL;
}

}  // namespace

ExpertsFile::ExpertsFile(const std::string& path, IoMode mode, uint64_t expected_bytes, uint64_t record_bytes,
                         int n_expert, const std::function<void(const std::string&)>& notice,
                         bool refuse_direct) {
  direct_ = mode == IoMode::kDirect;
  fd_ = refuse_direct && direct_ ? -1 : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct_ ? O_DIRECT : 0));
  if (refuse_direct && direct_) errno = EINVAL;
  if (fd_ < 0 && direct_ && errno == EINVAL) {
    direct_ = false;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd_ < 0) fail("{}: cannot open the expert records: {}", path, std::strerror(errno));

  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fail("{}: cannot stat: {}", path, std::strerror(err));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size != expected_bytes) {
    ::close(fd_);
    if (size > expected_bytes)
      fail(
          "{}: {} bytes, but the store layout has {} bytes of records; the store is damaged: re-run "
          "diskformer "
          "ingest",
          path, size, expected_bytes);
    const uint64_t first = size / record_bytes;
    const uint64_t n = static_cast<uint64_t>(n_expert);
    fail(
        "{}: {} bytes, but the store layout needs {}: the record of MoE layer {} expert {} (bytes {}..{}) "
        "and "
        "every later one are missing; the store is truncated: re-run diskformer ingest",
        path, size, expected_bytes, first / n, first % n, first * record_bytes, (first + 1) * record_bytes);
  }
  if (direct_ && !direct_read_works(fd_, size)) {
    ::close(fd_);
    direct_ = false;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("{}: cannot open the expert records: {}", path, std::strerror(errno));
  }
  if (mode == IoMode::kDirect && !direct_ && notice)
    notice(fmt::format("{}: the file system refuses O_DIRECT; reading through the page cache", path));
}

ExpertsFile::~ExpertsFile() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace df::stream

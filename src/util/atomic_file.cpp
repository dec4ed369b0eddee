#include "util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace df {

namespace {
constexpr size_t kBufferSize = 4 << 20;
}

AtomicFile::AtomicFile(std::string final_path)
    : final_path_(std::move(final_path)), temp_path_(final_path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create '{}': {}", temp_path_, std::strerror(errno));
  buf_.reserve(kBufferSize);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  written_ += n;
  while (n > 0) {
    size_t take = std::min(n, kBufferSize - buf_.size());
    buf_.append(p, take);
    p += take;
    n -= take;
    if (buf_.size() == kBufferSize) flush();
  }
}

void AtomicFile::flush() {
  size_t done = 0;
  while (done < buf_.size()) {
    ssize_t r = ::write(fd_, buf_.data() + done, buf_.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("write to '{}' failed: {}", temp_path_, std::strerror(errno));
    done += static_cast<size_t>(r);
  }
  buf_.clear();
}

void AtomicFile::commit() {
  flush();
  if (::fsync(fd_) != 0) fail("fsync of '{}' failed: {}", temp_path_, std::strerror(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("close of '{}' failed: {}", temp_path_, std::strerror(errno));
  }
  fd_ = -1;
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0)
    fail("cannot rename '{}' to '{}': {}", temp_path_, final_path_, std::strerror(errno));
  committed_ = true;
  fsync_parent_dir(final_path_);
}

void fsync_parent_dir(const std::string& path) {
  auto dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some filesystems do not allow opening directories
  ::fsync(fd);
  ::close(fd);
}

}  // namespace df

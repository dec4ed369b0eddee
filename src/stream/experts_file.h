#pragma once
// experts.bin opened for record reads: O_DIRECT when asked for and when the file system takes it (tmpfs, for
// one, refuses it: then the page cache, with a one-line notice), and its size checked against the layout.
#include <cstdint>
#include <functional>
#include <string>

#include "stream/read_backend.h"

namespace df::stream {

class ExpertsFile {
 public:
  // Throws df::Error naming the file when it cannot be opened, or when it is shorter or longer than
  // `expected_bytes` (naming the first record that is cut off).
  ExpertsFile(const std::string& path, IoMode mode, uint64_t expected_bytes, uint64_t record_bytes,
              int n_expert, const std::function<void(const std::string&)>& notice,
              bool refuse_direct = false);
  ~ExpertsFile();
  ExpertsFile(const ExpertsFile&) = delete;
  ExpertsFile& operator=(const ExpertsFile&) = delete;

  int fd() const { return fd_; }
  bool direct() const { return direct_; }

 private:
  int fd_ = -1;
  bool direct_ = false;
};

}  // namespace df::stream

#pragma once
// Writing a file so that a crash never leaves a half-written file under its final name: write to a temporary
// name beside it, fsync, rename over the final name, fsync the directory. Until commit() the temporary file is
// removed on destruction.
#include <cstdint>
#include <span>
#include <string>

namespace df {

class AtomicFile {
 public:
  explicit AtomicFile(std::string final_path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::span<const uint8_t> bytes) { write(bytes.data(), bytes.size()); }
  uint64_t written() const { return written_; }
  const std::string& temp_path() const { return temp_path_; }
  void commit();  // fsync, rename, fsync directory

 private:
  void flush();
  std::string final_path_, temp_path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  std::string buf_;
  bool committed_ = false;
};

// fsync the directory holding `path` so a rename into it is durable.
void fsync_parent_dir(const std::string& path);

}  // namespace df

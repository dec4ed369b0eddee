#pragma once
// GGUF v2/v3 reading and writing (ARCHITECTURES.md 11). The reader treats the file as hostile: every count,
// length, offset, type id and size is checked against the file size before it is used, and errors name the
// field and the byte offset.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_types.h"

namespace df::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

// A metadata value. Scalars keep their declared type; arrays hold their elements (which may be arrays).
struct Value {
  ValueType type = ValueType::UINT8;
  uint64_t u = 0;      // UINT*, BOOL
  int64_t i = 0;       // INT*
  double f = 0;        // FLOAT*
  std::string s;       // STRING
  ValueType elem = ValueType::UINT8;  // ARRAY: element type
  std::vector<Value> arr;             // ARRAY: elements

  bool is_int() const;     // any integer type (not BOOL)
  bool is_float() const;
  bool is_array() const { return type == ValueType::ARRAY; }
  // Conversions that throw df::Error (naming `what`) on a type mismatch or an out-of-range value.
  int64_t as_int(std::string_view what = "value") const;
  double as_float(std::string_view what = "value") const;  // ints convert too
  bool as_bool(std::string_view what = "value") const;
  const std::string& as_string(std::string_view what = "value") const;

  static Value of_u32(uint32_t v);
  static Value of_i32(int32_t v);
  static Value of_u64(uint64_t v);
  static Value of_f32(float v);
  static Value of_bool(bool v);
  static Value of_string(std::string v);
  static Value of_array(ValueType elem, std::vector<Value> items);
  static Value of_strings(const std::vector<std::string>& items);
  static Value of_i32s(const std::vector<int32_t>& items);
  static Value of_f32s(const std::vector<float>& items);
};

struct TensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ggml order: ne[0] contiguous
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;       // relative to the data section
  uint64_t file_offset = 0;  // absolute
  uint64_t nbytes = 0;
  bool external = false;     // described here, stored elsewhere (an expert store): no data in this file

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;  // "{256, 2048}"
};

class File {
 public:
  // Opens and validates the header, metadata and tensor table. Throws df::Error.
  static File open(const std::string& path);
  // Parses from memory (fuzzing, tests). `name` is used in messages.
  static File parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return file_size_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters: nullopt when absent; df::Error when present with the wrong type.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  // Throwing variants for required keys: "missing GGUF key 'lfm2moe.block_count'".
  int64_t require_int(std::string_view key) const;
  double require_float(std::string_view key) const;
  std::string require_string(std::string_view key) const;
  const Value& require(std::string_view key) const;

  std::string architecture() const;  // general.architecture, "" if absent

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& require_tensor(std::string_view name) const;

  // pread the tensor's bytes (or a byte range of them) into dst. Throws on I/O errors and short reads.
  void read_tensor(const TensorInfo& t, void* dst) const;
  void read_range(uint64_t file_offset, uint64_t nbytes, void* dst) const;
  // Tells the kernel the tensor's file pages are not needed again (POSIX_FADV_DONTNEED). A loader that copied
  // them into its own buffers then holds one copy, not two: the page cache is charged to the process's cgroup
  // too, and under a memory limit the second copy pushed the usage to the limit while the trunk loaded.
  void drop_cached(const TensorInfo& t) const;
  // Turns the kernel's readahead off for this file (POSIX_FADV_RANDOM): for a reader of whole tensors in an
  // order other than the file's, where readahead past one tensor only re-reads pages of another that
  // drop_cached already released (on lfm2-24b, 204 of its 532 MiB stayed cached that way).
  void advise_no_readahead() const;
  int fd() const { return fd_; }

  // Registers a tensor whose data lives outside this file (the routed experts of an expert store, whose
  // dense.bin holds everything else), so that a model binds its shape and type as if the file held it.
  // read_tensor() of it throws. The name must be new.
  void add_external_tensor(TensorInfo info);

 private:
  File() = default;
  std::string path_;
  int fd_ = -1;
  std::vector<uint8_t> mem_;  // only for parse()
  uint32_t version_ = 0;
  uint64_t file_size_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;

  friend class Parser;
};

// Writer. Tensors are described first; their data is produced in order by a callback, so a file far larger
// than memory can be written one tensor at a time. The file is written to "<path>.tmp.<pid>", fsynced and
// renamed, so a crash never leaves a half-written file under the final name.
struct TensorSpec {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // ggml order
  uint64_t nbytes() const;
};

class Writer {
 public:
  explicit Writer(uint32_t alignment = 32) : alignment_(alignment) {}
  void set(std::string key, Value v);  // keeps insertion order; replaces an existing key in place
  void add_tensor(TensorSpec spec);
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  // fill(i, out) must write exactly tensors()[i].nbytes() bytes into out.
  using FillFn = std::function<void(size_t index, std::span<uint8_t> out)>;
  void write(const std::string& path, const FillFn& fill) const;
  // Convenience for small files: all tensor data in memory, indexed like tensors().
  void write(const std::string& path, const std::vector<std::vector<uint8_t>>& data) const;

 private:
  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorSpec> tensors_;
};

}  // namespace df::gguf

// GGUF reader. Every field is read through a bounds-checked cursor, so a hostile file can make us throw but
// never read past its end, allocate more than its size, or overflow an offset computation.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "gguf/gguf.h"
#include "util/error.h"

namespace df::gguf {

namespace {

constexpr uint32_t kMaxDims = 4;
constexpr size_t kMaxTensorName = 64;  // ggml's GGML_MAX_NAME: llama.cpp rejects longer names
constexpr int kMaxArrayDepth = 8;

// Buffered, bounds-checked sequential reader over a file descriptor or a memory span.
class Cursor {
 public:
  Cursor(int fd, std::span<const uint8_t> mem, uint64_t size, std::string name)
      : fd_(fd), mem_(mem), size_(size), name_(std::move(name)) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }
  const std::string& name() const { return name_; }

  void read(void* dst, uint64_t n, std::string_view field) {
    if (n > remaining())
      fail("{}: truncated {} at offset {}: needs {} bytes, only {} left (file size {})", name_, field, pos_, n,
           remaining(), size_);
    if (!mem_.empty() || fd_ < 0) {
      std::memcpy(dst, mem_.data() + pos_, n);
      pos_ += n;
      return;
    }
    auto* out = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (pos_ < buf_start_ || pos_ >= buf_start_ + buf_.size()) fill();
      uint64_t avail = buf_start_ + buf_.size() - pos_;
      uint64_t take = std::min(avail, n);
      std::memcpy(out, buf_.data() + (pos_ - buf_start_), take);
      out += take;
      pos_ += take;
      n -= take;
    }
  }
  template <typename T>
  T get(std::string_view field) {
    T v;
    read(&v, sizeof v, field);
    return v;
  }
  std::string get_string(std::string_view field) {
    uint64_t at = pos_;
    auto len = get<uint64_t>(field);
    if (len > remaining())
      fail("{}: {} at offset {}: string length {} exceeds the {} bytes left in the file", name_, field, at, len,
           remaining());
    std::string s(len, '\0');
    read(s.data(), len, field);
    return s;
  }
  void seek(uint64_t p) { pos_ = p; }

 private:
  void fill() {
    constexpr size_t kChunk = 1 << 20;
    buf_start_ = pos_;
    size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, size_ - pos_));
    buf_.resize(want);
    size_t got = 0;
    while (got < want) {
      ssize_t r = ::pread(fd_, buf_.data() + got, want - got, static_cast<off_t>(pos_ + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail("{}: read error at offset {}: {}", name_, pos_ + got, std::strerror(errno));
      if (r == 0) fail("{}: file shrank while reading (offset {})", name_, pos_ + got);
      got += static_cast<size_t>(r);
    }
  }

  int fd_;
  std::span<const uint8_t> mem_;
  uint64_t size_;
  std::string name_;
  uint64_t pos_ = 0;
  std::vector<uint8_t> buf_;
  uint64_t buf_start_ = 0;
};

size_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL: return 1;
    case ValueType::UINT16:
    case ValueType::INT16: return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32: return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
    case ValueType::STRING: return 8;
    case ValueType::ARRAY: return 12;
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

}  // namespace

class Parser {
 public:
  explicit Parser(Cursor& c) : c_(c) {}

  void parse(File& f) {
    char magic[4];
    c_.read(magic, 4, "magic");
    if (std::memcmp(magic, "GGUF", 4) != 0)
      fail("{}: not a GGUF file (bad magic {:02x} {:02x} {:02x} {:02x} at offset 0, expected 'GGUF')", c_.name(),
           static_cast<uint8_t>(magic[0]), static_cast<uint8_t>(magic[1]), static_cast<uint8_t>(magic[2]),
           static_cast<uint8_t>(magic[3]));
    f.version_ = c_.get<uint32_t>("version");
    if (f.version_ == 1) fail("{}: GGUF version 1 is not supported (only 2 and 3)", c_.name());
    if (f.version_ != 2 && f.version_ != 3)
      fail("{}: unsupported GGUF version {} at offset 4 (supported: 2, 3)", c_.name(), f.version_);
    uint64_t at = c_.pos();
    auto n_tensors = c_.get<uint64_t>("tensor count");
    // Each tensor info takes at least 8 (name length) + 4 (n_dims) + 8 (ne0) + 4 (type) + 8 (offset) bytes.
    if (n_tensors > c_.remaining() / 32)
      fail("{}: tensor count {} at offset {} cannot fit in the {} bytes left", c_.name(), n_tensors, at,
           c_.remaining());
    at = c_.pos();
    auto n_kv = c_.get<uint64_t>("metadata count");
    if (n_kv > c_.remaining() / 13)
      fail("{}: metadata count {} at offset {} cannot fit in the {} bytes left", c_.name(), n_kv, at,
           c_.remaining());

    f.kv_.reserve(static_cast<size_t>(n_kv));
    for (uint64_t k = 0; k < n_kv; ++k) {
      uint64_t key_at = c_.pos();
      std::string key = c_.get_string(fmt::format("metadata key {}", k));
      if (key.empty()) fail("{}: metadata key {} at offset {} is empty", c_.name(), k, key_at);
      if (f.kv_index_.count(key)) fail("{}: duplicate metadata key '{}' at offset {}", c_.name(), key, key_at);
      std::string field = fmt::format("metadata '{}'", key);
      uint64_t type_at = c_.pos();
      auto t = c_.get<uint32_t>(field + " type");
      if (!valid_value_type(t))
        fail("{}: {}: unknown value type id {} at offset {}", c_.name(), field, t, type_at);
      Value v = read_value(static_cast<ValueType>(t), field, 0);
      f.kv_index_.emplace(key, f.kv_.size());
      f.kv_.emplace_back(std::move(key), std::move(v));
    }

    if (const Value* a = f.find("general.alignment")) {
      if (a->type != ValueType::UINT32)
        fail("{}: general.alignment must be UINT32, found {}", c_.name(), value_type_name(a->type));
      if (a->u == 0 || (a->u & (a->u - 1)) != 0)
        fail("{}: general.alignment {} is not a power of two", c_.name(), a->u);
      f.alignment_ = static_cast<uint32_t>(a->u);
    }

    f.tensors_.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t i = 0; i < n_tensors; ++i) f.tensors_.push_back(read_tensor_info(f, i));

    uint64_t end_of_infos = c_.pos();
    uint64_t pad = (f.alignment_ - end_of_infos % f.alignment_) % f.alignment_;
    f.data_offset_ = end_of_infos + pad;
    if (n_tensors > 0 && f.data_offset_ > c_.size())
      fail("{}: data section would start at offset {}, past end of file (size {})", c_.name(), f.data_offset_,
           c_.size());
    check_tensor_data(f);
  }

 private:
  Value read_value(ValueType t, const std::string& field, int depth) {
    Value v;
    v.type = t;
    switch (t) {
      case ValueType::UINT8: v.u = c_.get<uint8_t>(field); break;
      case ValueType::INT8: v.i = c_.get<int8_t>(field); break;
      case ValueType::UINT16: v.u = c_.get<uint16_t>(field); break;
      case ValueType::INT16: v.i = c_.get<int16_t>(field); break;
      case ValueType::UINT32: v.u = c_.get<uint32_t>(field); break;
      case ValueType::INT32: v.i = c_.get<int32_t>(field); break;
      case ValueType::UINT64: v.u = c_.get<uint64_t>(field); break;
      case ValueType::INT64: v.i = c_.get<int64_t>(field); break;
      case ValueType::FLOAT32: v.f = c_.get<float>(field); break;
      case ValueType::FLOAT64: v.f = c_.get<double>(field); break;
      case ValueType::BOOL: {
        uint64_t at = c_.pos();
        auto b = c_.get<uint8_t>(field);
        if (b > 1) fail("{}: {}: invalid BOOL byte {} at offset {}", c_.name(), field, b, at);
        v.u = b;
        break;
      }
      case ValueType::STRING: v.s = c_.get_string(field); break;
      case ValueType::ARRAY: {
        if (depth >= kMaxArrayDepth)
          fail("{}: {}: arrays nested deeper than {} at offset {}", c_.name(), field, kMaxArrayDepth, c_.pos());
        uint64_t at = c_.pos();
        auto et = c_.get<uint32_t>(field + " element type");
        if (!valid_value_type(et))
          fail("{}: {}: unknown array element type id {} at offset {}", c_.name(), field, et, at);
        v.elem = static_cast<ValueType>(et);
        at = c_.pos();
        auto n = c_.get<uint64_t>(field + " element count");
        if (n > c_.remaining() / min_encoded_size(v.elem))
          fail("{}: {}: array of {} {} at offset {} cannot fit in the {} bytes left", c_.name(), field, n,
               value_type_name(v.elem), at, c_.remaining());
        v.arr.reserve(static_cast<size_t>(n));
        for (uint64_t j = 0; j < n; ++j) v.arr.push_back(read_value(v.elem, field, depth + 1));
        break;
      }
    }
    return v;
  }

  TensorInfo read_tensor_info(const File& f, uint64_t i) {
    TensorInfo t;
    uint64_t at = c_.pos();
    std::string what = fmt::format("tensor {}", i);
    t.name = c_.get_string(what + " name");
    what = fmt::format("tensor {} '{}'", i, t.name);
    if (t.name.empty()) fail("{}: tensor {} at offset {} has an empty name", c_.name(), i, at);
    if (t.name.size() >= kMaxTensorName)
      fail("{}: {}: name is {} bytes, the limit is {}", c_.name(), what, t.name.size(), kMaxTensorName - 1);
    if (f.tensor_index_.count(t.name) || seen_.count(t.name))
      fail("{}: duplicate tensor name '{}' (tensor {} at offset {})", c_.name(), t.name, i, at);
    seen_.emplace(t.name, i);
    at = c_.pos();
    t.n_dims = c_.get<uint32_t>(what + " n_dims");
    if (t.n_dims == 0 || t.n_dims > kMaxDims)
      fail("{}: {}: n_dims {} at offset {} is out of range (1..{})", c_.name(), what, t.n_dims, at, kMaxDims);
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      at = c_.pos();
      auto ne = c_.get<int64_t>(what + " dimension");
      if (ne < 0) fail("{}: {}: dimension {} = {} at offset {} is negative", c_.name(), what, d, ne, at);
      t.ne[d] = ne;
    }
    // The element count must fit in int64 (ggml's own limit), checked without overflowing.
    int64_t prod = 1;
    for (uint32_t d = 0; d < kMaxDims; ++d) {
      if (t.ne[d] != 0 && prod > std::numeric_limits<int64_t>::max() / t.ne[d])
        fail("{}: {}: dimensions {} overflow the element count", c_.name(), what, t.shape_string());
      prod *= t.ne[d];
    }
    at = c_.pos();
    auto type_id = c_.get<uint32_t>(what + " type");
    auto traits = ggml_type_traits(type_id);
    if (!traits) fail("{}: {}: unknown ggml type id {} at offset {}", c_.name(), what, type_id, at);
    t.type = traits->type;
    if (t.ne[0] % traits->block_size != 0)
      fail("{}: {}: first dimension {} is not a multiple of the {} block size {}", c_.name(), what, t.ne[0],
           traits->name, traits->block_size);
    // bytes = ne0/bs * type_size * ne1 * ne2 * ne3, overflow-checked in unsigned 64-bit.
    uint64_t bytes = static_cast<uint64_t>(t.ne[0] / traits->block_size);
    auto mul = [&](uint64_t a, uint64_t b) {
      if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a)
        fail("{}: {}: byte size of {} {} overflows", c_.name(), what, traits->name, t.shape_string());
      return a * b;
    };
    bytes = mul(bytes, traits->type_size);
    for (uint32_t d = 1; d < kMaxDims; ++d) bytes = mul(bytes, static_cast<uint64_t>(t.ne[d]));
    t.nbytes = bytes;
    at = c_.pos();
    t.offset = c_.get<uint64_t>(what + " offset");
    if (t.offset % f.alignment_ != 0)
      fail("{}: {}: data offset {} (field at {}) is not a multiple of the alignment {}", c_.name(), what, t.offset,
           at, f.alignment_);
    return t;
  }

  void check_tensor_data(File& f) {
    uint64_t data_size = c_.size() > f.data_offset_ ? c_.size() - f.data_offset_ : 0;
    std::vector<size_t> order(f.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) {
      auto& t = f.tensors_[i];
      order[i] = i;
      if (t.offset > data_size || t.nbytes > data_size - t.offset)
        fail("{}: tensor {} '{}': data [{}, {}) ends past end of file (size {})", c_.name(), i, t.name,
             add_sat(f.data_offset_, t.offset), add_sat(add_sat(f.data_offset_, t.offset), t.nbytes),
             c_.size());
      t.file_offset = f.data_offset_ + t.offset;
      f.tensor_index_.emplace(t.name, i);
    }
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return f.tensors_[a].offset < f.tensors_[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const auto& p = f.tensors_[order[k - 1]];
      const auto& q = f.tensors_[order[k]];
      if (p.offset + p.nbytes > q.offset)
        fail("{}: tensor {} '{}' data [{}, {}) overlaps tensor {} '{}' data [{}, {})", c_.name(), order[k - 1], p.name,
             p.file_offset, p.file_offset + p.nbytes, order[k], q.name, q.file_offset, q.file_offset + q.nbytes);
    }
  }

  static uint64_t add_sat(uint64_t a, uint64_t b) {
    return b > std::numeric_limits<uint64_t>::max() - a ? std::numeric_limits<uint64_t>::max() : a + b;
  }

  Cursor& c_;
  std::map<std::string, uint64_t, std::less<>> seen_;
};

std::string TensorInfo::shape_string() const {
  std::string s = "{";
  for (uint32_t d = 0; d < std::max<uint32_t>(n_dims, 1); ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "}";
}

File::File(File&& o) noexcept { *this = std::move(o); }
File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    o.fd_ = -1;
    mem_ = std::move(o.mem_);
    version_ = o.version_;
    file_size_ = o.file_size_;
    alignment_ = o.alignment_;
    data_offset_ = o.data_offset_;
    kv_ = std::move(o.kv_);
    kv_index_ = std::move(o.kv_index_);
    tensors_ = std::move(o.tensors_);
    tensor_index_ = std::move(o.tensor_index_);
  }
  return *this;
}
File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File File::open(const std::string& path) {
  File f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0) fail("cannot stat '{}': {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("'{}' is not a regular file", path);
  f.file_size_ = static_cast<uint64_t>(st.st_size);
  Cursor c(f.fd_, {}, f.file_size_, path);
  Parser(c).parse(f);
  return f;
}

File File::parse(std::span<const uint8_t> bytes, std::string name) {
  File f;
  f.path_ = name;
  f.mem_.assign(bytes.begin(), bytes.end());
  f.file_size_ = bytes.size();
  Cursor c(-1, f.mem_, f.file_size_, std::move(name));
  Parser(c).parse(f);
  return f;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const Value& File::require(std::string_view key) const {
  const Value* v = find(key);
  if (!v) fail("{}: missing GGUF key '{}'", path_, key);
  return *v;
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return v->as_int(fmt::format("{}: key '{}'", path_, key));
}
std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return v->as_float(fmt::format("{}: key '{}'", path_, key));
}
std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return v->as_bool(fmt::format("{}: key '{}'", path_, key));
}
std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  return v->as_string(fmt::format("{}: key '{}'", path_, key));
}
int64_t File::require_int(std::string_view key) const {
  return require(key).as_int(fmt::format("{}: key '{}'", path_, key));
}
double File::require_float(std::string_view key) const {
  return require(key).as_float(fmt::format("{}: key '{}'", path_, key));
}
std::string File::require_string(std::string_view key) const {
  return require(key).as_string(fmt::format("{}: key '{}'", path_, key));
}

std::string File::architecture() const {
  auto a = get_string("general.architecture");
  return a ? *a : std::string();
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::require_tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("{}: missing tensor '{}'", path_, name);
  return *t;
}

void File::read_tensor(const TensorInfo& t, void* dst) const {
  if (t.external) fail("{}: tensor '{}' is not stored in this file (it lives in the expert store)", path_, t.name);
  read_range(t.file_offset, t.nbytes, dst);
}

void File::drop_cached(const TensorInfo& t) const {
  // Advice only: a failure changes nothing but the memory the cache keeps.
  if (fd_ >= 0 && !t.external && t.nbytes > 0)
    (void)::posix_fadvise(fd_, static_cast<off_t>(t.file_offset), static_cast<off_t>(t.nbytes),
                          POSIX_FADV_DONTNEED);
}

void File::advise_no_readahead() const {
  if (fd_ >= 0) (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
}

void File::add_external_tensor(TensorInfo info) {
  if (tensor_index_.count(info.name)) fail("{}: tensor '{}' already exists", path_, info.name);
  info.external = true;
  info.offset = info.file_offset = 0;
  tensor_index_.emplace(info.name, tensors_.size());
  tensors_.push_back(std::move(info));
}

void File::read_range(uint64_t off, uint64_t n, void* dst) const {
  if (off > file_size_ || n > file_size_ - off)
    fail("{}: read of [{}, {}) is past end of file (size {})", path_, off, off + n, file_size_);
  if (fd_ < 0) {
    std::memcpy(dst, mem_.data() + off, n);
    return;
  }
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < n) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, 1ull << 30));
    ssize_t r = ::pread(fd_, out + done, chunk, static_cast<off_t>(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("{}: read error at offset {}: {}", path_, off + done, std::strerror(errno));
    if (r == 0) fail("{}: unexpected end of file at offset {} (the file shrank?)", path_, off + done);
    done += static_cast<uint64_t>(r);
  }
}

}  // namespace df::gguf

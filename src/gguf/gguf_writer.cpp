#include <algorithm>
#include <vector>

#include "gguf/gguf.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace df::gguf {

namespace {

class Encoder {
 public:
  explicit Encoder(AtomicFile& out) : out_(out) {}
  template <typename T>
  void put(T v) {
    out_.write(&v, sizeof v);
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.write(s.data(), s.size());
  }
  void put_value(const Value& v) {
    switch (v.type) {
      case ValueType::UINT8: put<uint8_t>(static_cast<uint8_t>(v.u)); break;
      case ValueType::INT8: put<int8_t>(static_cast<int8_t>(v.i)); break;
      case ValueType::UINT16: put<uint16_t>(static_cast<uint16_t>(v.u)); break;
      case ValueType::INT16: put<int16_t>(static_cast<int16_t>(v.i)); break;
      case ValueType::UINT32: put<uint32_t>(static_cast<uint32_t>(v.u)); break;
      case ValueType::INT32: put<int32_t>(static_cast<int32_t>(v.i)); break;
      case ValueType::UINT64: put<uint64_t>(v.u); break;
      case ValueType::INT64: put<int64_t>(v.i); break;
      case ValueType::FLOAT32: put<float>(static_cast<float>(v.f)); break;
      case ValueType::FLOAT64: put<double>(v.f); break;
      case ValueType::BOOL: put<uint8_t>(v.u ? 1 : 0); break;
      case ValueType::STRING: put_string(v.s); break;
      case ValueType::ARRAY:
        put<uint32_t>(static_cast<uint32_t>(v.elem));
        put<uint64_t>(v.arr.size());
        for (const auto& e : v.arr) put_value(e);
        break;
    }
  }
  void pad_to(uint64_t alignment) {
    static const std::vector<uint8_t> zeros(4096, 0);
    uint64_t pad = (alignment - out_.written() % alignment) % alignment;
    while (pad > 0) {
      uint64_t n = std::min<uint64_t>(pad, zeros.size());
      out_.write(zeros.data(), n);
      pad -= n;
    }
  }

 private:
  AtomicFile& out_;
};

uint64_t padded(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

}  // namespace

uint64_t TensorSpec::nbytes() const {
  const auto& tr = ggml_traits(type);
  if (ne.empty() || ne.size() > 4) fail("tensor '{}': {} dimensions (1..4 allowed)", name, ne.size());
  if (ne[0] % tr.block_size != 0)
    fail("tensor '{}': first dimension {} is not a multiple of the {} block size {}", name, ne[0], tr.name,
         tr.block_size);
  uint64_t bytes = static_cast<uint64_t>(ne[0] / tr.block_size) * tr.type_size;
  for (size_t d = 1; d < ne.size(); ++d) bytes *= static_cast<uint64_t>(ne[d]);
  return bytes;
}

void Writer::set(std::string key, Value v) {
  for (auto& kv : kv_)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  kv_.emplace_back(std::move(key), std::move(v));
}

void Writer::add_tensor(TensorSpec spec) {
  for (const auto& t : tensors_)
    if (t.name == spec.name) fail("duplicate tensor '{}'", spec.name);
  if (spec.name.size() >= 64) fail("tensor name '{}' is longer than 63 bytes", spec.name);
  spec.nbytes();  // validates the shape
  tensors_.push_back(std::move(spec));
}

void Writer::write(const std::string& path, const FillFn& fill) const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) fail("alignment {} is not a power of two", alignment_);
  AtomicFile out(path);
  Encoder enc(out);
  out.write("GGUF", 4);
  enc.put<uint32_t>(3);
  enc.put<uint64_t>(tensors_.size());
  bool has_alignment = false;
  for (const auto& kv : kv_) has_alignment |= kv.first == "general.alignment";
  enc.put<uint64_t>(kv_.size() + ((alignment_ != 32 && !has_alignment) ? 1 : 0));
  for (const auto& [key, value] : kv_) {
    enc.put_string(key);
    enc.put<uint32_t>(static_cast<uint32_t>(value.type));
    enc.put_value(value);
  }
  if (alignment_ != 32 && !has_alignment) {
    enc.put_string("general.alignment");
    enc.put<uint32_t>(static_cast<uint32_t>(ValueType::UINT32));
    enc.put<uint32_t>(alignment_);
  }
  uint64_t offset = 0;
  size_t largest = 0;
  for (const auto& t : tensors_) {
    enc.put_string(t.name);
    enc.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (auto d : t.ne) enc.put<int64_t>(d);
    enc.put<uint32_t>(static_cast<uint32_t>(t.type));
    enc.put<uint64_t>(offset);
    offset += padded(t.nbytes(), alignment_);
    largest = std::max<size_t>(largest, t.nbytes());
  }
  enc.pad_to(alignment_);
  std::vector<uint8_t> buf(largest);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    std::span<uint8_t> span(buf.data(), tensors_[i].nbytes());
    fill(i, span);
    out.write(span);
    enc.pad_to(alignment_);
  }
  out.commit();
}

void Writer::write(const std::string& path, const std::vector<std::vector<uint8_t>>& data) const {
  if (data.size() != tensors_.size()) fail("{} tensors described but {} data buffers given", tensors_.size(), data.size());
  for (size_t i = 0; i < data.size(); ++i)
    if (data[i].size() != tensors_[i].nbytes())
      fail("tensor '{}': {} bytes given, {} expected", tensors_[i].name, data[i].size(), tensors_[i].nbytes());
  write(path, [&](size_t i, std::span<uint8_t> out) { std::copy(data[i].begin(), data[i].end(), out.begin()); });
}

}  // namespace df::gguf

#pragma once
// Builds GGUF bytes field by field, so tests and the fuzzer seed corpus can write files that are wrong in
// exactly one place.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace df::testing {

struct GgufBytes {
  std::vector<uint8_t> b;
  template <typename T>
  GgufBytes& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  GgufBytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    put<uint32_t>(version);
    put<uint64_t>(n_tensors);
    put<uint64_t>(n_kv);
    return *this;
  }
  GgufBytes& kv_u32(const std::string& k, uint32_t v) {
    str(k);
    put<uint32_t>(4);
    return put<uint32_t>(v);
  }
  GgufBytes& kv_str(const std::string& k, const std::string& v) {
    str(k);
    put<uint32_t>(8);
    return str(v);
  }
  GgufBytes& tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name);
    put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (auto d : ne) put<int64_t>(d);
    put<uint32_t>(type);
    return put<uint64_t>(offset);
  }
  GgufBytes& pad(size_t alignment = 32) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  GgufBytes& data(size_t n, uint8_t fill = 0x11) {
    b.insert(b.end(), n, fill);
    return *this;
  }
};

// A small valid file: two F32 tensors of 8 values and a few metadata keys of several types.
inline std::vector<uint8_t> small_valid_gguf() {
  GgufBytes g;
  g.header(2, 3).kv_str("general.architecture", "test").kv_u32("test.block_count", 2);
  g.str("test.list")
      .put<uint32_t>(9)
      .put<uint32_t>(5)
      .put<uint64_t>(3)
      .put<int32_t>(1)
      .put<int32_t>(-2)
      .put<int32_t>(3);
  g.tensor("a.weight", {8}, 0, 0).tensor("b.weight", {4, 2}, 0, 32).pad().data(64);
  return g.b;
}

}  // namespace df::testing

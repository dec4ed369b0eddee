#pragma once
// A synthetic expert store for the stream tests: experts.bin of random records, their xxh3-64 checksums and a
// store::Layout in memory, in a fresh directory under DF_TEST_TMP (a real disk, so O_DIRECT works there).
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "stream/record_source.h"

namespace df::stream::testing {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A directory named after the running test, emptied first.
inline std::string fresh_dir(const std::string& tag = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name() + tag;
  for (char& c : name)
    if (c == '/') c = '_';
  const std::filesystem::path dir = std::filesystem::path(DF_TEST_TMP) / "stream" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

struct SyntheticStore {
  RecordSource source;
  std::vector<uint8_t> bytes;  // the whole of experts.bin as written

  int n_layers() const { return source.layout.n_moe_layers; }
  int n_expert() const { return source.layout.n_expert; }
  uint64_t record_bytes() const { return source.layout.record_bytes; }
  const uint8_t* record(int layer, int expert) const {
    return bytes.data() + source.layout.record_offset(layer, expert);
  }
  bool matches(int layer, int expert, const uint8_t* got) const {
    return std::memcmp(got, record(layer, expert), record_bytes()) == 0;
  }

  // Changes one byte of experts.bin on disk (the checksums keep the original).
  void flip_byte(int layer, int expert, uint64_t offset_in_record) const {
    std::fstream f(source.experts_path, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t at = source.layout.record_offset(layer, expert) + offset_in_record;
    f.seekp(static_cast<std::streamoff>(at));
    const char c = static_cast<char>(bytes[at] ^ 0x40);
    f.write(&c, 1);
  }
  void truncate_file(uint64_t size) const {
    ASSERT_EQ(::truncate(source.experts_path.c_str(), static_cast<off_t>(size)), 0);
  }
};

// Records of F32 gate/up (n_ff rows of n_embd) and down (n_embd rows of n_ff) parts, 64-byte aligned inside a
// record padded to 4096: n_embd 16, n_ff 32 gives 3 x 2048 bytes in an 8192-byte record.
inline SyntheticStore make_store(const std::string& dir, int n_layers, int n_expert, uint64_t seed = 1,
                                 int64_t n_embd = 16, int64_t n_ff = 32) {
  SyntheticStore s;
  store::Layout& l = s.source.layout;
  l.n_moe_layers = n_layers;
  l.n_expert = n_expert;
  const uint64_t part = static_cast<uint64_t>(n_embd * n_ff) * 4;
  const uint64_t part_stride = (part + 63) / 64 * 64;
  l.record_bytes = (3 * part_stride + store::kRecordAlign - 1) / store::kRecordAlign * store::kRecordAlign;
  for (int i = 0; i < n_layers; ++i) {
    store::MoeLayerLayout m;
    m.layer = i + 1;
    auto part_at = [&](const char* what, int64_t n_in, int64_t n_out, uint64_t offset) {
      store::ExpertPart p;
      p.tensor = "blk." + std::to_string(i + 1) + ".ffn_" + what + "_exps.weight";
      p.type = GgmlType::F32;
      p.n_in = n_in;
      p.n_out = n_out;
      p.offset = offset;
      p.bytes = part;
      return p;
    };
    m.gate = part_at("gate", n_embd, n_ff, 0);
    m.up = part_at("up", n_embd, n_ff, part_stride);
    m.down = part_at("down", n_ff, n_embd, 2 * part_stride);
    l.layers.push_back(m);
  }
  const uint64_t n_records = static_cast<uint64_t>(n_layers) * static_cast<uint64_t>(n_expert);
  s.bytes.resize(n_records * l.record_bytes);
  uint64_t state = seed;
  for (size_t i = 0; i + 8 <= s.bytes.size(); i += 8) {
    const uint64_t v = splitmix64(state);
    std::memcpy(&s.bytes[i], &v, 8);
  }
  for (uint64_t r = 0; r < n_records; ++r)
    s.source.checksums.push_back(XXH3_64bits(s.bytes.data() + r * l.record_bytes, l.record_bytes));
  s.source.experts_path = dir + "/experts.bin";
  std::ofstream out(s.source.experts_path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(s.bytes.data()), static_cast<std::streamsize>(s.bytes.size()));
  return s;
}

}  // namespace df::stream::testing

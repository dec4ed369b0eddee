#pragma once
// Helpers shared by the store tests: scratch directories, whole-file reads, and the expected bytes of an
// expert record computed straight from the GGUF's tensors (not through the store's planner).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "golden_json.h"
#include "quant/q4_0x16.h"
#include "store/ingest.h"
#include "store/store.h"
#include "util/error.h"

namespace df::testing {

namespace fs = std::filesystem;

inline std::string golden(const std::string& name) { return golden_path(name); }

// Scratch directories of the running test, removed when it passes (kept for a look when it fails).
inline std::vector<fs::path> scratch_dirs;

class ScratchCleaner : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Passed())
      for (const auto& p : scratch_dirs) fs::remove_all(p);
    scratch_dirs.clear();
  }
};

inline const bool scratch_cleaner_registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new ScratchCleaner);
  return true;
}();

// A fresh, empty directory named after the running test.
inline std::string scratch_dir(const std::string& suffix = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name() + suffix;
  std::replace(name.begin(), name.end(), '/', '_');
  fs::path p = fs::path(DF_TEST_TMP) / "store" / name;
  fs::remove_all(p);
  fs::create_directories(p);
  scratch_dirs.push_back(p);
  return p.string();
}

inline std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

inline std::string slurp_text(const std::string& path) {
  auto b = slurp(path);
  return {b.begin(), b.end()};
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) {
  write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

// ctest runs every TEST in its own process, in parallel: each process builds its own fixture store.
inline std::string fixture_dir(const std::string& name) {
  return (fs::path(DF_TEST_TMP) / "store" / "fixtures" / (name + "." + std::to_string(::getpid()))).string();
}

// Options for quick, isolated ingests: no sha index, cache under the scratch folder.
inline store::IngestOptions quiet_options(const std::string& out_dir) {
  store::IngestOptions o;
  o.output_dir = out_dir;
  o.use_index = false;
  o.cache_root = (fs::path(DF_TEST_TMP) / "store" / "cache-unused").string();
  return o;
}

// Copies a store directory's three files (damage tests work on the copy).
inline std::string copy_store(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::create_directories(to);
  for (const char* f : {store::kManifestFile, store::kExpertsFile, store::kDenseFile})
    fs::copy_file(fs::path(from) / f, fs::path(to) / f);
  return to;
}

// One part of an expert record in the source: rows [row0, row0 + rows) of each expert's slab of a tensor (a
// fused gate_up tensor holds gate rows then up rows).
struct ExpectedPart {
  const gguf::TensorInfo* t = nullptr;
  int64_t row0 = 0, rows = 0;
  uint64_t bytes() const { return ggml_row_bytes(t->type, t->ne[0]) * static_cast<uint64_t>(rows); }
};
// The source tensors of each MoE layer, found by name, independent of the store's planner.
struct ExpectedLayer {
  int layer = 0;
  ExpectedPart gate, up, down;
};

inline std::vector<ExpectedLayer> expected_layers(const gguf::File& f) {
  std::map<int, ExpectedLayer> m;
  for (int blk = 0; blk < 1000; ++blk) {
    auto name = [&](const char* part) {
      return "blk." + std::to_string(blk) + ".ffn_" + part + "_exps.weight";
    };
    const auto* down = f.find_tensor(name("down"));
    if (!down) continue;
    const int64_t F = down->ne[0], H = down->ne[1];
    ExpectedLayer l{blk, {}, {}, {down, 0, H}};
    if (const auto* fused = f.find_tensor(name("gate_up"))) {
      l.gate = {fused, 0, F};
      l.up = {fused, F, F};
    } else {
      l.gate = {f.find_tensor(name("gate")), 0, F};
      l.up = {f.find_tensor(name("up")), 0, F};
    }
    m[blk] = l;
  }
  std::vector<ExpectedLayer> out;
  for (auto& [k, v] : m) out.push_back(v);
  return out;
}

inline uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// gate slab, up slab, down slab of expert e, each part at the next multiple of 64, zero padding to
// record_bytes; a Q4_0 slab of whole 16-row groups repacked as Q4_0x16 (store format 2).
inline std::vector<uint8_t> expected_record(const gguf::File& f, const ExpectedLayer& l, int expert,
                                            uint64_t record_bytes) {
  std::vector<uint8_t> rec(record_bytes, 0);
  uint64_t at = 0;
  for (const ExpectedPart& p : {l.gate, l.up, l.down}) {
    const gguf::TensorInfo* t = p.t;
    const uint64_t expert_slab = t->nbytes / static_cast<uint64_t>(t->ne[2]), part = p.bytes();
    const uint64_t offset = ggml_row_bytes(t->type, t->ne[0]) * static_cast<uint64_t>(p.row0);
    EXPECT_LE(at + part, record_bytes);
    f.read_range(t->file_offset + static_cast<uint64_t>(expert) * expert_slab + offset, part,
                 rec.data() + at);
    if (t->type == GgmlType::Q4_0 && p.rows % quant::kQ4_0x16Rows == 0) {
      std::vector<uint8_t> rows(rec.begin() + static_cast<ptrdiff_t>(at),
                                rec.begin() + static_cast<ptrdiff_t>(at + part));
      quant::pack_q4_0x16(rows.data(), p.rows, t->ne[0], rec.data() + at);
    }
    at = round_up(at + part, 64);
  }
  return rec;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no df::Error was thrown";
  return "";
}

}  // namespace df::testing

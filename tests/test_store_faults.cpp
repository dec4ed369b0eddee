// A store that disagrees with its manifest or its source is refused with the reason and the fix: each damage
// below gets its own message, and none of them crashes or passes as a good store.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "store/ingest.h"
#include "store/record_io.h"
#include "store/source_id.h"
#include "store/store.h"
#include "test_store_util.h"

using namespace df;
using namespace df::testing;

namespace {

using Json = nlohmann::ordered_json;

class StoreFaults : public ::testing::Test {
 protected:
  static std::string base_dir() { return fixture_dir("faults-lfm2"); }
  static std::string qwen_dir() { return fixture_dir("faults-qwen"); }
  static void SetUpTestSuite() {
    for (auto [dir, model] :
         {std::pair{base_dir(), "lfm2moe-tiny.gguf"}, std::pair{qwen_dir(), "qwen3moe-tiny.gguf"}}) {
      fs::remove_all(dir);
      auto opt = quiet_options(dir);
      store::ingest(golden(model), opt);
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(base_dir());
    fs::remove_all(qwen_dir());
  }
  // A private copy of the good lfm2moe-tiny store.
  std::string copy() { return copy_store(base_dir(), scratch_dir()); }
  static std::string file(const std::string& dir, const char* name) {
    return (fs::path(dir) / name).string();
  }
  static Json manifest(const std::string& dir) {
    return Json::parse(slurp_text(file(dir, store::kManifestFile)));
  }
  static void set_manifest(const std::string& dir, const Json& j) {
    write_text(file(dir, store::kManifestFile), j.dump(1));
  }
  static std::string open_error(const std::string& dir) {
    return error_of([&] { store::Store::open(dir); });
  }
};

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST_F(StoreFaults, TheGoodCopyOpensAndVerifies) {
  auto dir = copy();
  store::Store::open(dir).verify(false);
}

TEST_F(StoreFaults, TruncatedExpertsFileIsRefusedWithSizesAndFix) {
  auto dir = copy();
  auto size = fs::file_size(file(dir, store::kExpertsFile));
  fs::resize_file(file(dir, store::kExpertsFile), size - 4096);
  auto msg = open_error(dir);
  EXPECT_HAS(msg, fmt::format("experts.bin is {} bytes, manifest.json says {}", size - 4096, size));
  EXPECT_HAS(msg, "the store is damaged");
  EXPECT_HAS(msg, "diskformer ingest lfm2moe-tiny.gguf -o " + dir);
}

TEST_F(StoreFaults, FlippedByteInARecordIsNamedByVerify) {
  auto dir = copy();
  auto s = store::Store::open(dir);
  const auto& L = s.layout();
  auto bytes = slurp(s.experts_path());
  uint64_t at = L.record_offset(2, 5) + L.layers[2].up.offset + 100;
  bytes[at] ^= 0x10;
  write_file(s.experts_path(), bytes);
  auto reopened = store::Store::open(dir);  // sizes are fine: only the checksums can tell
  auto msg = error_of([&] { reopened.verify(false); });
  EXPECT_HAS(msg, "1 of 64 records");
  EXPECT_HAS(msg, fmt::format("MoE layer 2 (blk.{}), expert 5, bytes [{}, {})", L.layers[2].layer,
                              L.record_offset(2, 5), L.record_offset(2, 6)));
  EXPECT_HAS(msg, "--force");
}

TEST_F(StoreFaults, FlippedByteInADenseTensorIsNamedByVerify) {
  auto dir = copy();
  auto s = store::Store::open(dir);
  auto dense = gguf::File::open(s.dense_path());
  const auto& t = dense.require_tensor("blk.0.attn_norm.weight");
  auto bytes = slurp(s.dense_path());
  bytes[t.file_offset + 3] ^= 1;
  write_file(s.dense_path(), bytes);
  auto msg = error_of([&] { store::Store::open(dir).verify(false); });
  EXPECT_HAS(msg, "dense.bin tensor 'blk.0.attn_norm.weight'");
}

TEST_F(StoreFaults, ManifestWithoutTheCompleteFlagIsIncomplete) {
  auto dir = copy();
  Json j = manifest(dir);
  j.erase("complete");
  set_manifest(dir, j);
  auto msg = open_error(dir);
  EXPECT_HAS(msg, "is incomplete");
  EXPECT_HAS(msg, "diskformer ingest lfm2moe-tiny.gguf -o " + dir);
  j["complete"] = false;
  set_manifest(dir, j);
  EXPECT_HAS(open_error(dir), "does not mark it complete");
}

TEST_F(StoreFaults, WrongFormatVersionSaysWhichVersions) {
  auto dir = copy();
  Json j = manifest(dir);
  j["format_version"] = store::kFormatVersion + 1;
  set_manifest(dir, j);
  auto msg = open_error(dir);
  EXPECT_HAS(msg, fmt::format("format version {}; this diskformer reads version {}",
                              store::kFormatVersion + 1, store::kFormatVersion));
  j["format_version"] = 1;  // before Q4_0 parts were repacked
  set_manifest(dir, j);
  EXPECT_HAS(open_error(dir),
             fmt::format("format version 1; this diskformer reads version {}", store::kFormatVersion));
  EXPECT_HAS(msg, "lfm2moe-tiny.gguf");
}

TEST_F(StoreFaults, ManifestOfAnotherModelIsRefused) {
  auto dir = copy();
  const auto dense_size = fs::file_size(file(dir, store::kDenseFile));
  Json other = manifest(qwen_dir());
  set_manifest(dir, other);
  EXPECT_HAS(open_error(dir), fmt::format("dense.bin is {} bytes, manifest.json says", dense_size));
  // Same record size and count, and with the dense size patched to agree: dense.bin's header tells them
  // apart.
  other["files"]["dense.bin"]["bytes"] = dense_size;
  set_manifest(dir, other);
  auto msg = open_error(dir);
  EXPECT_HAS(msg, "dense.bin holds a 'lfm2moe' model but manifest.json says 'qwen3moe'");
  EXPECT_HAS(msg, "different stores");
}

TEST_F(StoreFaults, AStoreFromAnotherSourceIsNamedByCheckSource) {
  auto s = store::Store::open(base_dir());
  store::SourceInfo other{"qwen3moe-tiny.gguf", fs::file_size(golden("qwen3moe-tiny.gguf")),
                          store::sha256_file(golden("qwen3moe-tiny.gguf"))};
  auto msg = error_of([&] { s.check_source(other); });
  EXPECT_HAS(msg, "was made from lfm2moe-tiny.gguf");
  EXPECT_HAS(msg, "not qwen3moe-tiny.gguf");
  EXPECT_HAS(msg, other.sha256);
  store::SourceInfo same{"renamed.gguf", s.source().size, s.source().sha256};
  s.check_source(same);  // the name does not matter, the bytes do
}

TEST_F(StoreFaults, MissingFilesAreNamed) {
  for (const char* f : {store::kExpertsFile, store::kDenseFile}) {
    auto dir = copy();
    fs::remove(file(dir, f));
    EXPECT_HAS(open_error(dir), std::string(f) + " is missing");
  }
  auto dir = copy();
  fs::remove(file(dir, store::kManifestFile));
  EXPECT_HAS(open_error(dir), "is incomplete: it has no manifest.json");
  auto empty = scratch_dir("_empty");
  EXPECT_HAS(open_error(empty), "is not a diskformer store");
  EXPECT_HAS(open_error(empty + "/nope"), "does not exist");
}

TEST_F(StoreFaults, MalformedManifestsNameTheField) {
  auto dir = copy();
  write_text(file(dir, store::kManifestFile), "{\"format\": \"diskformer-store\", ");
  EXPECT_HAS(open_error(dir), "not valid JSON");

  Json good = manifest(base_dir());
  Json j = good;
  j["layout"].erase("record_bytes");
  set_manifest(dir, j);
  EXPECT_HAS(open_error(dir), "field 'layout.record_bytes' is missing");

  j = good;
  j["layout"]["layers"][1]["up"]["bytes"] = 7;
  set_manifest(dir, j);
  EXPECT_HAS(open_error(dir), "up part 'blk.3.ffn_up_exps.weight': 7 bytes");

  j = good;
  j["records"]["xxh3"].erase(0);
  set_manifest(dir, j);
  EXPECT_HAS(open_error(dir), "holds 63 checksums, expected 64");

  j = good;
  j["records"]["xxh3"][3] = "not-a-checksum!!";
  set_manifest(dir, j);
  EXPECT_HAS(open_error(dir), "records.xxh3[3]");

  j = good;
  j["source"]["sha256"] = 12;
  set_manifest(dir, j);
  EXPECT_HAS(open_error(dir), "field 'source.sha256'");
}

TEST_F(StoreFaults, ExpertsFileGrownOrReplacedByGarbage) {
  auto dir = copy();
  auto path = file(dir, store::kExpertsFile);
  auto size = fs::file_size(path);
  fs::resize_file(path, size + 1);
  EXPECT_HAS(open_error(dir), fmt::format("experts.bin is {} bytes", size + 1));
  write_file(path, std::vector<uint8_t>(size, 0xab));
  auto msg = error_of([&] { store::Store::open(dir).verify(false); });
  EXPECT_HAS(msg, "64 of 64 records");
  EXPECT_HAS(msg, "MoE layer 0 (blk.2), expert 0");
}

TEST_F(StoreFaults, DenseBinThatIsNotAGguf) {
  auto dir = copy();
  auto path = file(dir, store::kDenseFile);
  auto size = fs::file_size(path);
  write_file(path, std::vector<uint8_t>(size, 0));
  EXPECT_HAS(open_error(dir), "dense.bin is not a valid GGUF");
}

}  // namespace

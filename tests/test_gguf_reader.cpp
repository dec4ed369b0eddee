#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "gguf/gguf.h"
#include "gguf_bytes.h"
#include "util/error.h"

namespace fs = std::filesystem;
using df::gguf::File;
using df::gguf::Value;
using df::gguf::ValueType;
using df::testing::GgufBytes;

namespace {

const char* kGolden[] = {"lfm2moe-tiny.gguf", "lfm2moe-medium.gguf", "lfm2moe-tiny-f16.gguf",
                         "qwen3moe-tiny.gguf", "gpt-oss-tiny.gguf"};

std::string golden(const char* name) { return std::string(DF_GOLDEN_DIR) + "/" + name; }

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// Parses bytes and returns the error message; fails the test if parsing succeeds.
std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    File::parse(bytes, "bad.gguf");
  } catch (const df::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "malformed file was accepted";
  return "";
}

}  // namespace

TEST(GgufReader, ParsesEveryGoldenModel) {
  for (const char* name : kGolden) {
    SCOPED_TRACE(name);
    File f = File::open(golden(name));
    EXPECT_EQ(f.version(), 3u);
    EXPECT_FALSE(f.architecture().empty());
    EXPECT_GT(f.tensors().size(), 10u);
    ASSERT_NE(f.find("tokenizer.ggml.tokens"), nullptr);
    EXPECT_TRUE(f.find("tokenizer.ggml.tokens")->is_array());
    uint64_t end = 0;
    for (const auto& t : f.tensors()) {
      EXPECT_EQ(t.file_offset, f.data_offset() + t.offset);
      EXPECT_EQ(t.file_offset % f.alignment(), 0u);
      end = std::max(end, t.file_offset + t.nbytes);
    }
    EXPECT_LE(end, f.file_size());
    EXPECT_GE(end + f.alignment(), f.file_size());  // the data section is used up to the last padding
  }
}

TEST(GgufReader, GoldenHyperparametersMatchTheirJson) {
  File f = File::open(golden("lfm2moe-tiny.gguf"));
  EXPECT_EQ(f.architecture(), "lfm2moe");
  EXPECT_EQ(f.require_int("lfm2moe.block_count"), 6);
  EXPECT_EQ(f.require_int("lfm2moe.embedding_length"), 256);
  EXPECT_EQ(f.require_int("lfm2moe.expert_count"), 16);
  const auto& kv = f.require("lfm2moe.attention.head_count_kv");
  ASSERT_TRUE(kv.is_array());
  ASSERT_EQ(kv.arr.size(), 6u);
  EXPECT_EQ(kv.arr[2].as_int(), 2);
  EXPECT_EQ(kv.arr[0].as_int(), 0);
  EXPECT_EQ(f.require("tokenizer.ggml.tokens").arr.size(), 2048u);
  const auto& emb = f.require_tensor("token_embd.weight");
  EXPECT_EQ(emb.type, df::GgmlType::Q6_K);
  EXPECT_EQ(emb.ne[0], 256);
  EXPECT_EQ(emb.ne[1], 2048);
  EXPECT_EQ(emb.nbytes, 256u / 256 * 210 * 2048);
  EXPECT_THROW(f.require_tensor("output.weight"), df::Error);
  EXPECT_THROW(f.require_int("lfm2moe.nope"), df::Error);
  EXPECT_THROW(f.require_int("general.architecture"), df::Error);  // a string, not an int
}

TEST(GgufReader, OpenAndParseAgree) {
  auto bytes = slurp(golden("qwen3moe-tiny.gguf"));
  File a = File::open(golden("qwen3moe-tiny.gguf"));
  File b = File::parse(bytes);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    EXPECT_EQ(a.tensors()[i].name, b.tensors()[i].name);
    EXPECT_EQ(a.tensors()[i].file_offset, b.tensors()[i].file_offset);
  }
  const auto& t = a.require_tensor("blk.0.attn_q.weight");
  std::vector<uint8_t> x(t.nbytes), y(t.nbytes);
  a.read_tensor(t, x.data());
  b.read_tensor(b.require_tensor("blk.0.attn_q.weight"), y.data());
  EXPECT_EQ(x, y);
  EXPECT_TRUE(std::equal(x.begin(), x.end(), bytes.begin() + static_cast<long>(t.file_offset)));
}

// Rewriting a parsed file with the writer gives the same metadata, tensor table and data, byte for byte.
TEST(GgufWriter, RoundTripOfEveryGoldenModelIsByteIdentical) {
  fs::create_directories(DF_TEST_TMP);
  for (const char* name : kGolden) {
    SCOPED_TRACE(name);
    File src = File::open(golden(name));
    df::gguf::Writer w(src.alignment());
    for (const auto& [k, v] : src.metadata()) w.set(k, v);
    for (const auto& t : src.tensors())
      w.add_tensor({t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)});
    std::string out = std::string(DF_TEST_TMP) + "/roundtrip-" + name;
    w.write(out, [&](size_t i, std::span<uint8_t> buf) { src.read_tensor(src.tensors()[i], buf.data()); });
    EXPECT_EQ(slurp(out), slurp(golden(name)));
    File back = File::open(out);
    EXPECT_EQ(back.metadata().size(), src.metadata().size());
    fs::remove(out);
  }
}

TEST(GgufWriter, WritesAtomicallyAndLeavesNothingOnFailure) {
  fs::create_directories(DF_TEST_TMP);
  std::string out = std::string(DF_TEST_TMP) + "/atomic.gguf";
  fs::remove(out);
  df::gguf::Writer w;
  w.set("general.architecture", Value::of_string("test"));
  w.set("test.values", Value::of_f32s({1.5f, -2.0f}));
  w.add_tensor({"x", df::GgmlType::F32, {4, 3}});
  EXPECT_THROW(w.write(out, [](size_t, std::span<uint8_t>) { throw df::Error("generator failed"); }),
               df::Error);
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(DF_TEST_TMP))
    EXPECT_EQ(e.path().filename().string().find("atomic.gguf.tmp"), std::string::npos) << e.path();
  w.write(out, [](size_t, std::span<uint8_t> b) {
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i);
  });
  File f = File::open(out);
  EXPECT_EQ(f.require("test.values").arr[1].as_float(), -2.0);
  std::vector<uint8_t> d(48);
  f.read_tensor(f.require_tensor("x"), d.data());
  EXPECT_EQ(d[47], 47);
  EXPECT_THROW(w.add_tensor({"x", df::GgmlType::F32, {4}}), df::Error);
  EXPECT_THROW(w.add_tensor({"q", df::GgmlType::Q4_0, {33}}), df::Error);
}

TEST(GgufReader, NestedArraysAndEveryValueType) {
  GgufBytes g;
  g.header(0, 14);
  g.str("u8").put<uint32_t>(0).put<uint8_t>(200);
  g.str("i8").put<uint32_t>(1).put<int8_t>(-5);
  g.str("u16").put<uint32_t>(2).put<uint16_t>(60000);
  g.str("i16").put<uint32_t>(3).put<int16_t>(-30000);
  g.str("u32").put<uint32_t>(4).put<uint32_t>(4000000000u);
  g.str("i32").put<uint32_t>(5).put<int32_t>(-7);
  g.str("f32").put<uint32_t>(6).put<float>(0.25f);
  g.str("b").put<uint32_t>(7).put<uint8_t>(1);
  g.str("s").put<uint32_t>(8).str("hé");
  g.str("u64").put<uint32_t>(10).put<uint64_t>(1ull << 40);
  g.str("i64").put<uint32_t>(11).put<int64_t>(-(1ll << 40));
  g.str("f64").put<uint32_t>(12).put<double>(-1.5);
  g.str("nested").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(2);
  g.put<uint32_t>(8).put<uint64_t>(1).str("x");
  g.put<uint32_t>(4).put<uint64_t>(2).put<uint32_t>(1).put<uint32_t>(2);
  g.str("empty").put<uint32_t>(9).put<uint32_t>(6).put<uint64_t>(0);
  File f = File::parse(g.b);
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_EQ(f.get_int("i8"), -5);
  EXPECT_EQ(f.get_int("u16"), 60000);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_int("u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("i32"), -7);
  EXPECT_EQ(f.get_float("f32"), 0.25);
  EXPECT_EQ(f.get_bool("b"), true);
  EXPECT_EQ(f.get_string("s"), "hé");
  EXPECT_EQ(f.get_int("u64"), 1ll << 40);
  EXPECT_EQ(f.get_int("i64"), -(1ll << 40));
  EXPECT_EQ(f.get_float("f64"), -1.5);
  const auto& n = f.require("nested");
  ASSERT_EQ(n.arr.size(), 2u);
  EXPECT_EQ(n.arr[0].arr[0].as_string(), "x");
  EXPECT_EQ(n.arr[1].arr[1].as_int(), 2);
  EXPECT_EQ(f.require("empty").arr.size(), 0u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_FALSE(f.get_int("absent").has_value());
  EXPECT_THROW(f.get_string("u8"), df::Error);
}

TEST(GgufReader, AcceptsVersion2) {
  auto b = df::testing::small_valid_gguf();
  b[4] = 2;
  File f = File::parse(b);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.tensors().size(), 2u);
}

// Every prefix of a valid file is rejected with a "truncated" or "past end" error, never a crash.
TEST(GgufMalformed, TruncationAtEveryByteOfTheHeader) {
  auto good = df::testing::small_valid_gguf();
  File::parse(good);  // the untruncated file is valid
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
    std::string e = error_of(cut);
    EXPECT_TRUE(e.find("truncated") != std::string::npos || e.find("past end of file") != std::string::npos ||
                e.find("cannot fit") != std::string::npos || e.find("exceeds") != std::string::npos)
        << "at " << n << ": " << e;
  }
}

TEST(GgufMalformed, SpecificErrors) {
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
    const char* expect;
  };
  std::vector<Case> cases;
  auto base = [] { return GgufBytes(); };
  {
    auto b = df::testing::small_valid_gguf();
    b[0] = 'X';
    cases.push_back({"bad magic", b, "bad magic"});
  }
  {
    auto b = df::testing::small_valid_gguf();
    b[4] = 1;
    cases.push_back({"version 1", b, "version 1 is not supported"});
    b[4] = 4;
    cases.push_back({"version 4", b, "unsupported GGUF version 4"});
  }
  cases.push_back({"huge tensor count", base().header(1ull << 60, 0).b, "tensor count"});
  cases.push_back({"huge kv count", base().header(0, 1ull << 62).b, "metadata count"});
  {
    auto g = base().header(0, 1);
    g.put<uint64_t>(1ull << 50).data(16);
    cases.push_back({"huge key length", g.b, "string length"});
  }
  {
    auto g = base().header(0, 1);
    g.str("k").put<uint32_t>(8).put<uint64_t>(~0ull);
    cases.push_back({"huge string value", g.b, "exceeds"});
  }
  {
    auto g = base().header(0, 1);
    g.str("k").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(1ull << 61);
    cases.push_back({"huge array count", g.b, "cannot fit"});
  }
  {
    auto g = base().header(0, 1);
    g.str("k").put<uint32_t>(13).put<uint32_t>(0);
    cases.push_back({"unknown value type", g.b, "unknown value type id 13"});
  }
  {
    auto g = base().header(0, 1);
    g.str("k").put<uint32_t>(9).put<uint32_t>(99).put<uint64_t>(0);
    cases.push_back({"unknown array element type", g.b, "unknown array element type id 99"});
  }
  {
    auto g = base().header(0, 1);
    g.str("k").put<uint32_t>(9);
    for (int d = 0; d < 12; ++d) g.put<uint32_t>(9).put<uint64_t>(1);
    g.put<uint32_t>(4).put<uint64_t>(0);
    cases.push_back({"deep nesting", g.b, "nested deeper"});
  }
  {
    auto g = base().header(0, 1);
    g.str("k").put<uint32_t>(7).put<uint8_t>(7);
    cases.push_back({"bad bool", g.b, "invalid BOOL"});
  }
  cases.push_back(
      {"duplicate key", base().header(0, 2).kv_u32("a", 1).kv_u32("a", 2).b, "duplicate metadata key 'a'"});
  cases.push_back({"alignment not a power of two", base().header(0, 1).kv_u32("general.alignment", 24).b,
                   "not a power of two"});
  {
    auto g = base().header(0, 1);
    g.kv_str("general.alignment", "32");
    cases.push_back({"alignment of wrong type", g.b, "must be UINT32"});
  }
  cases.push_back(
      {"offset past end",
       base().header(1, 0).tensor("blk.3.ffn_up_exps.weight", {8}, 0, 1024).pad().data(32).b,
       "tensor 0 'blk.3.ffn_up_exps.weight': data [1120, 1152) ends past end of file (size 128)"});
  cases.push_back({"data past end", base().header(1, 0).tensor("t", {64}, 0, 0).pad().data(100).b,
                   "ends past end of file"});
  cases.push_back({"overlap",
                   base().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad().data(96).b,
                   "overlaps tensor 1 'b'"});
  cases.push_back({"unknown type id", base().header(1, 0).tensor("t", {8}, 77, 0).pad().data(32).b,
                   "unknown ggml type id 77"});
  cases.push_back({"removed type id 4", base().header(1, 0).tensor("t", {32}, 4, 0).pad().data(32).b,
                   "unknown ggml type id 4"});
  cases.push_back({"dimension overflow",
                   base().header(1, 0).tensor("t", {1ll << 40, 1ll << 40}, 0, 0).pad().data(32).b,
                   "overflow"});
  cases.push_back({"byte size overflow",
                   base().header(1, 0).tensor("t", {1ll << 31, 1ll << 31, 1ll << 1}, 0, 0).pad().data(32).b,
                   "overflow"});
  cases.push_back(
      {"negative dimension", base().header(1, 0).tensor("t", {-8}, 0, 0).pad().data(32).b, "negative"});
  cases.push_back(
      {"too many dims", base().header(1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0).pad().data(32).b, "n_dims 5"});
  cases.push_back({"zero dims", base().header(1, 0).tensor("t", {}, 0, 0).pad().data(32).b, "n_dims 0"});
  cases.push_back({"block size", base().header(1, 0).tensor("t", {33}, 2, 0).pad().data(64).b,
                   "not a multiple of the Q4_0 block size 32"});
  cases.push_back({"misaligned offset", base().header(1, 0).tensor("t", {2}, 0, 4).pad().data(64).b,
                   "not a multiple of the alignment"});
  cases.push_back({"duplicate tensor",
                   base().header(2, 0).tensor("t", {8}, 0, 0).tensor("t", {8}, 0, 32).pad().data(64).b,
                   "duplicate tensor name 't'"});
  cases.push_back({"long tensor name",
                   base().header(1, 0).tensor(std::string(80, 'n'), {8}, 0, 0).pad().data(32).b,
                   "the limit is 63"});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::string e = error_of(c.bytes);
    EXPECT_NE(e.find(c.expect), std::string::npos) << "got: " << e;
    EXPECT_NE(e.find("bad.gguf"), std::string::npos) << "error does not name the file: " << e;
  }
}

TEST(GgufMalformed, OpenReportsMissingAndNonRegularFiles) {
  EXPECT_THROW(File::open("/nonexistent/model.gguf"), df::Error);
  EXPECT_THROW(File::open("/tmp"), df::Error);
}

// Random byte flips in the header region: the reader must either accept the file or throw df::Error.
TEST(GgufMalformed, RandomCorruptionNeverCrashes) {
  auto good = df::testing::small_valid_gguf();
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = good;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    try {
      File::parse(b);
    } catch (const df::Error&) {
    }
  }
  SUCCEED();
}

// Ingest of the golden models: every record equals the slabs gathered straight from the GGUF, dense.bin holds
// the rest with all metadata, the store opens and verifies, and two ingests write identical bytes.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "store/ingest.h"
#include "store/record_io.h"
#include "store/store.h"
#include "test_store_util.h"

using namespace df;
using namespace df::testing;

namespace {

// Type and value, recursively for arrays (element type, length, every element); floats compared bitwise.
bool same_value(const gguf::Value& a, const gguf::Value& b) {
  if (a.type != b.type || a.u != b.u || a.i != b.i || a.s != b.s) return false;
  if (std::memcmp(&a.f, &b.f, sizeof(double)) != 0) return false;
  if (a.is_array() && (a.elem != b.elem || a.arr.size() != b.arr.size())) return false;
  for (size_t k = 0; k < a.arr.size(); ++k)
    if (!same_value(a.arr[k], b.arr[k])) return false;
  return true;
}

class GoldenIngest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenIngest, RecordsEqualTheGgufSlabsAndDenseHoldsTheRest) {
  const std::string model = GetParam();
  const std::string dir = scratch_dir();
  auto src = gguf::File::open(golden(model + ".gguf"));
  auto info = nlohmann::json::parse(slurp_text(golden(model + ".json")));

  store::IngestResult r = store::ingest(src.path(), quiet_options(dir));
  EXPECT_FALSE(r.already_complete);
  EXPECT_EQ(r.source.sha256, info["model"]["sha256"].get<std::string>());
  EXPECT_EQ(r.source.size, info["model"]["bytes"].get<uint64_t>());
  EXPECT_EQ(r.source.name, model + ".gguf");

  store::Store s = store::Store::open(dir);
  EXPECT_EQ(s.architecture(), info["model"]["arch"].get<std::string>());
  EXPECT_EQ(s.source().sha256, r.source.sha256);
  const store::Layout& L = s.layout();
  auto layers = expected_layers(src);
  ASSERT_EQ(L.n_moe_layers, static_cast<int>(layers.size()));
  EXPECT_EQ(L.n_expert, info["model"]["shape"]["n_expert"].get<int>());
  EXPECT_EQ(L.record_bytes % store::kRecordAlign, 0u);

  auto experts = slurp(s.experts_path());
  ASSERT_EQ(experts.size(), L.experts_bytes());
  int packed_parts = 0;
  for (int l = 0; l < L.n_moe_layers; ++l) {
    EXPECT_EQ(L.layers[l].layer, layers[l].layer);
    for (const store::ExpertPart* p : {&L.layers[l].gate, &L.layers[l].up, &L.layers[l].down}) {
      const bool packable = p->type == GgmlType::Q4_0 && p->n_out % 16 == 0;
      EXPECT_EQ(p->packing, packable ? quant::RowPacking::kQ4_0x16 : quant::RowPacking::kNone) << p->tensor;
      packed_parts += packable;
    }
    uint64_t content = 0;
    for (const ExpectedPart& p : {layers[l].gate, layers[l].up, layers[l].down})
      content = round_up(content, 64) + p.bytes();
    EXPECT_EQ(L.record_bytes, round_up(content, store::kRecordAlign));
    for (int e = 0; e < L.n_expert; ++e) {
      auto want = expected_record(src, layers[l], e, L.record_bytes);
      const uint8_t* got = experts.data() + L.record_offset(l, e);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), got)) << "MoE layer " << l << " expert " << e;
      EXPECT_EQ(s.record_checksum(l, e), XXH3_64bits(want.data(), want.size()));
    }
  }

  if (model != "gpt-oss-tiny" && model != "hy_v3-tiny") {  // MXFP4 and Q8_0 experts are stored as they are
    EXPECT_GT(packed_parts, 0) << "the Q4_0 golden models have packable experts";
  }

  // dense.bin: every non-expert tensor with the source's bytes, every source key, the store keys.
  auto dense = gguf::File::open(s.dense_path());
  EXPECT_EQ(dense.alignment(), 4096u);
  size_t n_expert_tensors = 0;
  for (const auto& t : src.tensors()) {
    bool is_expert = t.name.ends_with("_exps.weight");
    n_expert_tensors += is_expert;
    const auto* d = dense.find_tensor(t.name);
    if (is_expert) {
      EXPECT_EQ(d, nullptr) << t.name;
      continue;
    }
    ASSERT_NE(d, nullptr) << t.name;
    EXPECT_EQ(d->type, t.type);
    EXPECT_EQ(d->ne, t.ne);
    EXPECT_EQ(d->file_offset % 4096, 0u);
    std::vector<uint8_t> a(t.nbytes), b(d->nbytes);
    src.read_tensor(t, a.data());
    dense.read_tensor(*d, b.data());
    EXPECT_EQ(a, b) << t.name;
  }
  EXPECT_EQ(dense.tensors().size() + n_expert_tensors, src.tensors().size());
  for (const auto& [key, v] : src.metadata()) {
    if (key == "general.alignment") continue;
    const auto* dv = dense.find(key);
    ASSERT_NE(dv, nullptr) << key;
    EXPECT_TRUE(same_value(*dv, v)) << key << ": dense.bin holds another value than the source";
  }
  EXPECT_EQ(dense.get_string("diskformer.store.source_sha256"), r.source.sha256);
  EXPECT_EQ(dense.get_int("diskformer.store.n_expert"), L.n_expert);
  EXPECT_EQ(dense.get_int("diskformer.store.record_bytes"), static_cast<int64_t>(L.record_bytes));
  const auto* moe = dense.find("diskformer.store.moe_layers");
  ASSERT_NE(moe, nullptr);
  ASSERT_EQ(moe->arr.size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) EXPECT_EQ(moe->arr[i].as_int(), layers[i].layer);

  uint64_t dense_bytes = 0;
  for (const auto& t : dense.tensors()) dense_bytes += t.nbytes;
  EXPECT_EQ(s.verify(false), L.experts_bytes() + dense_bytes);
  EXPECT_FALSE(fs::exists(fs::path(dir) / store::kJournalFile));
  EXPECT_FALSE(fs::exists(fs::path(dir) / store::kExpertsPartialFile));
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenIngest,
                         ::testing::Values("lfm2moe-tiny", "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny",
                                           "gemma4-tiny", "qwen35moe-tiny"),
                         [](const auto& p) {
                           std::string n = p.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(Ingest, GptOssExpertBiasesStayDense) {
  const std::string dir = scratch_dir();
  store::ingest(golden("gpt-oss-tiny.gguf"), quiet_options(dir));
  auto dense = gguf::File::open(store::Store::open(dir).dense_path());
  for (const char* part : {"gate", "up", "down"}) {
    const auto* b = dense.find_tensor(std::string("blk.1.ffn_") + part + "_exps.bias");
    ASSERT_NE(b, nullptr) << part;
    EXPECT_EQ(b->ne[1], 16);
  }
  auto s = store::Store::open(dir);
  EXPECT_EQ(s.layout().layers[0].gate.type, GgmlType::MXFP4);
}

TEST(Ingest, TwoIngestsWriteIdenticalFilesWhateverTheBatchSize) {
  const std::string a = scratch_dir("_a"), b = scratch_dir("_b");
  store::ingest(golden("lfm2moe-tiny.gguf"), quiet_options(a));
  auto opt = quiet_options(b);
  opt.memory_budget = 1;  // one expert per batch
  store::ingest(golden("lfm2moe-tiny.gguf"), opt);
  for (const char* f : {store::kManifestFile, store::kExpertsFile, store::kDenseFile})
    EXPECT_EQ(slurp((fs::path(a) / f).string()), slurp((fs::path(b) / f).string())) << f;
}

TEST(Ingest, ManifestCarriesSourceLayoutChecksumsAndCompleteLast) {
  const std::string dir = scratch_dir();
  auto r = store::ingest(golden("qwen3moe-tiny.gguf"), quiet_options(dir));
  std::string text = slurp_text((fs::path(dir) / store::kManifestFile).string());
  auto j = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(j["format_version"], store::kFormatVersion);
  EXPECT_EQ(j["architecture"], "qwen3moe");
  EXPECT_EQ(j["source"]["sha256"], r.source.sha256);
  EXPECT_EQ(j["records"]["xxh3"].size(), r.layout.n_records());
  EXPECT_EQ(j["config"]["qwen3moe.expert_count"], 16);
  EXPECT_EQ(j.back(), true);
  EXPECT_EQ((--j.end()).key(), "complete");
  EXPECT_EQ(j["layout"]["layers"][0]["gate"]["tensor"], "blk.0.ffn_gate_exps.weight");
}

TEST(Ingest, AnExistingCompleteStoreIsReusedAndForceRebuildsIt) {
  const std::string dir = scratch_dir();
  auto first = store::ingest(golden("lfm2moe-tiny.gguf"), quiet_options(dir));
  auto again = store::ingest(golden("lfm2moe-tiny.gguf"), quiet_options(dir));
  EXPECT_TRUE(again.already_complete);
  auto opt = quiet_options(dir);
  opt.force = true;
  auto forced = store::ingest(golden("lfm2moe-tiny.gguf"), opt);
  EXPECT_FALSE(forced.already_complete);
  store::Store::open(dir).verify(false);
}

TEST(Ingest, ADirectoryWithAnotherModelsStoreIsRefusedWithoutForce) {
  const std::string dir = scratch_dir();
  store::ingest(golden("lfm2moe-tiny.gguf"), quiet_options(dir));
  std::string msg = error_of([&] { store::ingest(golden("qwen3moe-tiny.gguf"), quiet_options(dir)); });
  EXPECT_NE(msg.find("holds the store of lfm2moe-tiny.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--force"), std::string::npos) << msg;
  EXPECT_EQ(store::Store::open(dir).architecture(), "lfm2moe");  // untouched
  auto opt = quiet_options(dir);
  opt.force = true;
  store::ingest(golden("qwen3moe-tiny.gguf"), opt);
  EXPECT_EQ(store::Store::open(dir).architecture(), "qwen3moe");
}

TEST(Ingest, ADamagedStoreOfTheSameModelIsRebuiltByAPlainIngest) {
  const std::string dir = scratch_dir();
  store::ingest(golden("lfm2moe-tiny.gguf"), quiet_options(dir));
  fs::resize_file(fs::path(dir) / store::kExpertsFile, 4096);
  std::string note;
  auto opt = quiet_options(dir);
  opt.on_message = [&](const std::string& m) { note += m; };
  auto r = store::ingest(golden("lfm2moe-tiny.gguf"), opt);
  EXPECT_FALSE(r.already_complete);
  EXPECT_NE(note.find("experts.bin is 4096 bytes"), std::string::npos) << note;
  store::Store::open(dir).verify(false);
}

// A fused ffn_gate_up_exps {H, 2F, E} splits into gate rows 0..F-1 and up rows F..2F-1; a layer whose down
// projection has another block type gets its own part sizes, and every record takes the largest size.
TEST(Ingest, FusedGateUpAndMixedTypesPerLayer) {
  const std::string dir = scratch_dir() + "/store";
  const std::string path = scratch_dir("_model") + "/fused-mixed.gguf";
  const int64_t H = 64, F = 32, E = 3;
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::of_string("testmoe"));
  w.set("testmoe.expert_count", gguf::Value::of_u32(E));
  w.add_tensor({"token_embd.weight", GgmlType::F32, {H, 8}});
  w.add_tensor({"blk.0.ffn_gate_up_exps.weight", GgmlType::Q8_0, {H, 2 * F, E}});
  w.add_tensor({"blk.0.ffn_down_exps.weight", GgmlType::F16, {F, H, E}});
  w.add_tensor({"blk.1.ffn_gate_exps.weight", GgmlType::Q8_0, {H, F, E}});
  w.add_tensor({"blk.1.ffn_up_exps.weight", GgmlType::Q8_0, {H, F, E}});
  w.add_tensor({"blk.1.ffn_down_exps.weight", GgmlType::Q8_0, {F, H, E}});
  std::vector<std::vector<uint8_t>> data;
  uint32_t x = 12345;
  for (const auto& t : w.tensors()) {
    std::vector<uint8_t> d(t.nbytes());
    for (auto& b : d) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 16);
    data.push_back(std::move(d));
  }
  w.write(path, data);

  store::ingest(path, quiet_options(dir));
  store::Store s = store::Store::open(dir);
  const auto& L = s.layout();
  ASSERT_EQ(L.n_moe_layers, 2);
  const auto& l0 = L.layers[0];
  EXPECT_EQ(l0.gate.tensor, "blk.0.ffn_gate_up_exps.weight");
  EXPECT_EQ(l0.up.first_row, F);
  EXPECT_EQ(l0.down.type, GgmlType::F16);
  const uint64_t q8_row = H / 32 * 34, f16_row = F * 2;
  EXPECT_EQ(l0.gate.bytes, q8_row * F);
  EXPECT_EQ(l0.down.bytes, f16_row * H);
  EXPECT_EQ(L.layers[1].down.bytes, uint64_t(F / 32 * 34 * H));
  EXPECT_EQ(L.record_bytes, 12288u);  // layer 0: 2176 + 2176 + 4096 bytes of parts; layer 1 needs only 8192

  auto experts = slurp(s.experts_path());
  for (int e = 0; e < E; ++e) {
    const uint8_t* rec = experts.data() + L.record_offset(0, e);
    const auto& gu = data[1];
    const uint8_t* slab = gu.data() + e * 2 * F * q8_row;
    EXPECT_TRUE(std::equal(slab, slab + F * q8_row, rec + l0.gate.offset)) << e;
    EXPECT_TRUE(std::equal(slab + F * q8_row, slab + 2 * F * q8_row, rec + l0.up.offset)) << e;
    const uint8_t* down = data[2].data() + e * H * f16_row;
    EXPECT_TRUE(std::equal(down, down + H * f16_row, rec + l0.down.offset)) << e;
    const uint8_t* rec1 = experts.data() + L.record_offset(1, e);
    const uint8_t* up1 = data[4].data() + e * F * q8_row;
    EXPECT_TRUE(std::equal(up1, up1 + F * q8_row, rec1 + L.layers[1].up.offset)) << e;
  }
  s.verify(false);
}

TEST(Ingest, ShapesThatDisagreeAndDenseOnlyFilesAreRefused) {
  const std::string dir = scratch_dir();
  auto make = [&](const std::string& name, auto&& add) {
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::of_string("testmoe"));
    add(w);
    std::vector<std::vector<uint8_t>> data;
    for (const auto& t : w.tensors()) data.emplace_back(t.nbytes(), 0);
    std::string path = (fs::path(dir) / name).string();
    w.write(path, data);
    return path;
  };
  auto dense_only = make("dense.gguf", [](gguf::Writer& w) {
    w.add_tensor({"token_embd.weight", GgmlType::F32, {8, 8}});
  });
  auto msg = error_of([&] { store::ingest(dense_only, quiet_options(dir + "/a")); });
  EXPECT_NE(msg.find("no routed-expert tensors"), std::string::npos) << msg;

  auto no_up = make("no-up.gguf", [](gguf::Writer& w) {
    w.add_tensor({"blk.0.ffn_gate_exps.weight", GgmlType::F32, {8, 4, 2}});
    w.add_tensor({"blk.0.ffn_down_exps.weight", GgmlType::F32, {4, 8, 2}});
  });
  msg = error_of([&] { store::ingest(no_up, quiet_options(dir + "/b")); });
  EXPECT_NE(msg.find("lacks blk.0.ffn_up_exps.weight"), std::string::npos) << msg;

  auto bad_e = make("bad-e.gguf", [](gguf::Writer& w) {
    for (int l = 0; l < 2; ++l) {
      int64_t E = l == 0 ? 2 : 3;
      std::string b = "blk." + std::to_string(l) + ".ffn_";
      w.add_tensor({b + "gate_exps.weight", GgmlType::F32, {8, 4, E}});
      w.add_tensor({b + "up_exps.weight", GgmlType::F32, {8, 4, E}});
      w.add_tensor({b + "down_exps.weight", GgmlType::F32, {4, 8, E}});
    }
  });
  msg = error_of([&] { store::ingest(bad_e, quiet_options(dir + "/c")); });
  EXPECT_NE(msg.find("every MoE layer must have the same number of experts"), std::string::npos) << msg;

  auto bad_shape = make("bad-shape.gguf", [](gguf::Writer& w) {
    w.add_tensor({"blk.0.ffn_gate_exps.weight", GgmlType::F32, {8, 4, 2}});
    w.add_tensor({"blk.0.ffn_up_exps.weight", GgmlType::F32, {8, 5, 2}});
    w.add_tensor({"blk.0.ffn_down_exps.weight", GgmlType::F32, {4, 8, 2}});
  });
  msg = error_of([&] { store::ingest(bad_shape, quiet_options(dir + "/d")); });
  EXPECT_NE(msg.find("'blk.0.ffn_up_exps.weight' has shape {8, 5, 2}"), std::string::npos) << msg;
}

}  // namespace

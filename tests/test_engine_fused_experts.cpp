// Fused gate/up experts (blk.N.ffn_gate_up_exps.weight {n_embd, 2·n_ff, n_expert}, each expert's gate rows
// then its up rows, as llama.cpp's create_tensor_gate_up_exps loads them): a copy of hy_v3-tiny (whose
// llama.cpp loader takes them fused) with every layer's ffn_gate_exps and ffn_up_exps fused into one tensor
// gives, for every row of every position, the separate file's logits, per-layer residuals and routing bit for
// bit (memcmp): with every expert resident, and streamed from a store through a small expert cache, with and
// without a device tier. Fused tensors of the wrong shape, or beside the separate ones, are refused naming
// the tensor.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/model_source.h"
#include "error_matchers.h"
#include "gguf/tensor_names.h"
#include "models_test_util.h"
#include "store/ingest.h"
#include "streaming_rows.h"
#include "util/error.h"

namespace df {
namespace {

using models::test_util::GoldenModel;
using models::test_util::TensorEdit;
using namespace testing::rows;

const GoldenModel kTiny("hy_v3-tiny", "fused");

std::string fused_name(int layer) { return fmt::format("blk.{}.ffn_gate_up_exps.weight", layer); }

// Fuses a layer's ffn_gate_exps and ffn_up_exps into ffn_gate_up_exps in the gate's place: each expert's
// slab is its gate rows, then its up rows. Only layer `only_layer` when it is not negative; the separate up
// tensor is kept too when `keep_up`.
TensorEdit fuse_gate_up(int only_layer = -1, bool keep_up = false) {
  return [only_layer, keep_up](gguf::TensorSpec& s, std::vector<uint8_t>& gate) {
    const auto name = gguf::parse_expert_tensor_name(s.name);
    if (!name || (only_layer >= 0 && name->layer != only_layer)) return true;
    if (name->kind == gguf::ExpertTensorKind::Up) return keep_up;
    if (name->kind != gguf::ExpertTensorKind::Gate) return true;
    const gguf::TensorInfo& up =
        kTiny.file().require_tensor(fmt::format("blk.{}.ffn_up_exps.weight", name->layer));
    EXPECT_EQ(up.nbytes, gate.size());
    std::vector<uint8_t> up_bytes(up.nbytes);
    kTiny.file().read_tensor(up, up_bytes.data());
    const size_t n_expert = static_cast<size_t>(s.ne[2]), slab = gate.size() / n_expert;
    std::vector<uint8_t> fused(2 * gate.size());
    for (size_t e = 0; e < n_expert; ++e) {
      std::memcpy(fused.data() + 2 * e * slab, gate.data() + e * slab, slab);
      std::memcpy(fused.data() + (2 * e + 1) * slab, up_bytes.data() + e * slab, slab);
    }
    s.name = fused_name(name->layer);
    s.ne[1] *= 2;
    gate = std::move(fused);
    return true;
  };
}

// A fused copy whose fused tensors then get shape `ne` (their data cut or grown to match).
TensorEdit fuse_then_reshape(std::vector<int64_t> ne) {
  return [ne = std::move(ne)](gguf::TensorSpec& s, std::vector<uint8_t>& bytes) {
    if (!fuse_gate_up()(s, bytes)) return false;
    if (s.name.ends_with("ffn_gate_up_exps.weight")) {
      s.ne = ne;
      bytes.resize(s.nbytes());
    }
    return true;
  };
}

// Every layer fused; each test writes its own copy (CTest may run the tests of this file side by side).
std::string fused_path(const std::string& test) {
  return kTiny.write_variant(test + "-all", nullptr, fuse_gate_up());
}

RunRecord resident_run(const std::string& path) {
  auto o = options_for(path);
  o.resident = true;
  OpenedModel m = open_model(o);
  return run_every_row(m, teacher_forced_prompt("hy_v3-tiny"));
}

const RunRecord& separate_resident_run() {
  static const RunRecord r = resident_run(golden_path("hy_v3-tiny.gguf"));
  return r;
}

models::ModelInfo tiny_info() { return models::load_model(kTiny.file(), {})->info(); }

// The first MoE block of hy_v3-tiny and its shapes, read from the separate file.
struct MoeShape {
  int layer = -1;
  int64_t H = 0, F = 0, E = 0;
};
MoeShape first_moe_layer() {
  MoeShape m;
  m.layer = tiny_info().moe_layers.at(0);
  const auto& gate = kTiny.file().require_tensor(fmt::format("blk.{}.ffn_gate_exps.weight", m.layer));
  m.H = gate.ne[0], m.F = gate.ne[1], m.E = gate.ne[2];
  return m;
}

TEST(FusedGateUpExperts, TheLayoutNamesTheFusedTensorWithGateRowsFirstAndTheSameMatrices) {
  const auto fused_file = gguf::File::open(fused_path("layout"));
  models::test_util::RecordingProvider *fused = nullptr, *separate = nullptr;
  auto load = [](const gguf::File& f, models::test_util::RecordingProvider** out) {
    models::LoadOptions o;
    o.make_expert_provider = [out](const gguf::File& file, const models::ExpertLayout& l) {
      auto p = std::make_unique<models::test_util::RecordingProvider>(file, l);
      *out = p.get();
      return p;
    };
    return models::load_model(f, o);
  };
  auto fused_model = load(fused_file, &fused);
  auto separate_model = load(kTiny.file(), &separate);
  ASSERT_EQ(fused->layout.layers.size(), separate->layout.layers.size());
  ASSERT_FALSE(fused->layout.layers.empty());
  for (size_t i = 0; i < fused->layout.layers.size(); ++i) {
    const models::ExpertLayerLayout &f = fused->layout.layers[i], &s = separate->layout.layers[i];
    SCOPED_TRACE(fmt::format("MoE layer {} (block {})", i, f.model_layer));
    EXPECT_EQ(f.gate_name, fused_name(f.model_layer));
    EXPECT_EQ(f.up_name, fused_name(f.model_layer));
    EXPECT_TRUE(f.gate_up_fused());
    EXPECT_FALSE(s.gate_up_fused());
    EXPECT_EQ(f.gate_row0, 0);
    EXPECT_EQ(f.up_row0, s.n_ff);
    EXPECT_EQ(s.up_row0, 0);
    EXPECT_EQ(f.n_ff, s.n_ff);
    EXPECT_EQ(f.n_embd, s.n_embd);
    EXPECT_EQ(f.n_expert, s.n_expert);
    EXPECT_EQ(f.gate_type, s.gate_type);
    EXPECT_EQ(f.up_type, s.up_type);
    EXPECT_EQ(f.gate_bytes(), s.gate_bytes());  // one part's bytes, not the fused slab's
    EXPECT_EQ(f.up_bytes(), s.up_bytes());
    // The backend holds the same matrices, byte for byte.
    for (int e = 0; e < f.n_expert; ++e) {
      const experts::ExpertView a = fused->acquire(static_cast<int>(i), e);
      const experts::ExpertView b = separate->acquire(static_cast<int>(i), e);
      EXPECT_EQ(a.gate_packing, b.gate_packing);
      EXPECT_EQ(std::memcmp(a.gate, b.gate, s.gate_bytes()), 0) << "expert " << e << " gate";
      EXPECT_EQ(std::memcmp(a.up, b.up, s.up_bytes()), 0) << "expert " << e << " up";
      EXPECT_EQ(std::memcmp(a.down, b.down, s.down_bytes()), 0) << "expert " << e << " down";
      fused->release(static_cast<int>(i), e);
      separate->release(static_cast<int>(i), e);
    }
  }
}

TEST(FusedGateUpExperts, ResidentRunsAreBitIdenticalToTheSeparateFile) {
  const auto info = tiny_info();
  SCOPED_TRACE("every layer fused");
  expect_same_bits(resident_run(fused_path("resident")), separate_resident_run(), info);
  // llama.cpp decides per layer: one fused layer among separate ones.
  const int one = info.moe_layers.back();
  SCOPED_TRACE(fmt::format("only block {} fused", one));
  expect_same_bits(resident_run(kTiny.write_variant("resident-one", nullptr, fuse_gate_up(one))),
                   separate_resident_run(), info);
}

TEST(FusedGateUpExperts, StreamedAndTieredRunsAreBitIdenticalToTheSeparateFilesResidentRun) {
  const auto info = tiny_info();
  const MoeShape shape = first_moe_layer();
  store::IngestOptions io;
  io.output_dir = std::string(DF_TEST_TMP) + "/fused-store";
  io.use_index = false;
  io.force = true;
  const std::string store = store::resolve_store(fused_path("stream"), io);

  uint64_t record_bytes = 0;
  {
    OpenedModel probe = open_model(options_for(store));
    const store::Layout& layout = probe.store->layout();
    record_bytes = layout.record_bytes;
    // The records were cut from the fused tensor: gate rows first, then up rows.
    const store::MoeLayerLayout& l0 = layout.layers.at(0);
    EXPECT_EQ(l0.layer, shape.layer);
    EXPECT_EQ(l0.gate.tensor, fused_name(shape.layer));
    EXPECT_EQ(l0.up.tensor, fused_name(shape.layer));
    EXPECT_EQ(l0.gate.first_row, 0);
    EXPECT_EQ(l0.up.first_row, shape.F);
  }
  const uint64_t top_k = static_cast<uint64_t>(info.n_expert_used);
  for (int lookahead : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "RAM cache of one layer's top-k, lookahead " << lookahead);
    auto o = options_for(store);
    o.expert_cache_bytes = top_k * record_bytes;
    o.lookahead = lookahead;
    OpenedModel m = open_model(o);
    ASSERT_NE(m.cache, nullptr);
    EXPECT_EQ(m.cache->slots(), top_k);
    expect_same_bits(run_every_row(m, teacher_forced_prompt("hy_v3-tiny")), separate_resident_run(), info);
  }
  {
    SCOPED_TRACE("device tier (host memory) of top-k + 1 records over the RAM cache");
    auto o = options_for(store);
    o.device = "cpu";
    o.gpu_cache_bytes = (top_k + 1) * record_bytes;
    o.expert_cache_bytes = top_k * record_bytes;
    OpenedModel m = open_model(o);
    ASSERT_NE(m.tiers, nullptr);
    expect_same_bits(run_every_row(m, teacher_forced_prompt("hy_v3-tiny")), separate_resident_run(), info);
  }
}

TEST(FusedGateUpExperts, InconsistentFusedTensorsAreRefusedNamingTheTensor) {
  const MoeShape m = first_moe_layer();
  const std::string fused = fused_name(m.layer);
  // Only the gate half (a conversion that dropped the up rows).
  models::test_util::expect_load_error(
      kTiny.write_variant("half", nullptr, fuse_then_reshape({m.H, m.F, m.E})),
      fmt::format("tensor '{}' has shape {{{}, {}, {}}}, expected {{{}, {}, {}}}", fused, m.H, m.F, m.E, m.H,
                  2 * m.F, m.E));
  // Another expert count.
  models::test_util::expect_load_error(
      kTiny.write_variant("experts", nullptr, fuse_then_reshape({m.H, 2 * m.F, m.E / 2})),
      fmt::format("tensor '{}' has shape {{{}, {}, {}}}, expected {{{}, {}, {}}}", fused, m.H, 2 * m.F,
                  m.E / 2, m.H, 2 * m.F, m.E));
  // The fused tensor beside a separate one it stands in for.
  models::test_util::expect_load_error(
      kTiny.write_variant("both", nullptr, fuse_gate_up(-1, /*keep_up=*/true)),
      fmt::format("the file has 'blk.{}.ffn_up_exps.weight' and also '{}', which stands in for it", m.layer,
                  fused));
  // The store refuses a fused tensor that disagrees with the layer's down projection when it ingests.
  store::IngestOptions io;
  io.output_dir = std::string(DF_TEST_TMP) + "/fused-store-bad";
  io.use_index = false;
  io.force = true;
  const std::string bad = kTiny.write_variant("rows", nullptr, fuse_then_reshape({m.H, 2 * m.F + 2, m.E}));
  testing::expect_error([&] { store::resolve_store(bad, io); },
                        {fmt::format("'{}' has shape {{{}, {}, {}}}", fused, m.H, 2 * m.F + 2, m.E),
                         fmt::format("implies {{{}, {}, E}}", m.H, 2 * m.F)});
}

}  // namespace
}  // namespace df

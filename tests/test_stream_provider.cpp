// StreamingExpertProvider: the experts::ExpertProvider the model sees, with views into the cache's slots.
#include "error_matchers.h"
#include "stream/streaming_expert_provider.h"
#include "test_stream_fixture.h"
#include "util/error.h"

namespace df::stream {
namespace {

using testing::make_store;
using testing::SyntheticStore;

ExpertCacheOptions options(uint64_t slots) {
  ExpertCacheOptions o;
  o.slots = slots;
  o.min_slots = 2;
  o.notice = [](const std::string&) {};
  return o;
}

void expect_view(const SyntheticStore& s, int layer, int expert, const experts::ExpertView& v) {
  const store::MoeLayerLayout& l = s.source.layout.layers[static_cast<size_t>(layer)];
  const uint8_t* rec = s.record(layer, expert);
  EXPECT_EQ(std::memcmp(v.gate, rec + l.gate.offset, l.gate.bytes), 0);
  EXPECT_EQ(std::memcmp(v.up, rec + l.up.offset, l.up.bytes), 0);
  EXPECT_EQ(std::memcmp(v.down, rec + l.down.offset, l.down.bytes), 0);
  EXPECT_EQ(v.gate_type, GgmlType::F32);
  EXPECT_EQ(static_cast<const uint8_t*>(v.up) - static_cast<const uint8_t*>(v.gate),
            static_cast<ptrdiff_t>(l.up.offset));
}

TEST(StreamProvider, ViewsPointAtThePartsOfTheRecord) {
  const SyntheticStore store = make_store(testing::fresh_dir(), 3, 6);
  ExpertCache cache(store.source, options(4));
  StreamingExpertProvider p(cache);
  experts::ExpertProvider& model_side = p;
  model_side.will_acquire(1, std::vector<int32_t>{1, 3});
  expect_view(store, 1, 3, model_side.acquire(1, 3));  // out of order: whichever the model wants first
  expect_view(store, 1, 1, model_side.acquire(1, 1));
  model_side.release(1, 3);
  model_side.release(1, 1);
  expect_view(store, 2, 5, model_side.acquire(2, 5));  // without will_acquire
  model_side.release(2, 5);
  EXPECT_EQ(cache.telemetry().total.accesses, 3u);  // an announced expert is counted once
  df::testing::expect_error([&] { model_side.release(2, 5); },
                            {"release: MoE layer 2 expert 5 is not acquired"});
  df::testing::expect_error([&] { model_side.acquire(3, 0); },
                            {"acquire: MoE layer 3 out of range (3 layers)"});
  df::testing::expect_error([&] { model_side.acquire(0, 6); },
                            {"acquire: expert 6 out of range (MoE layer 0 has 6)"});
}

TEST(StreamProvider, AnnouncedButUnusedExpertsAreUnpinnedByTheNextLayer) {
  const SyntheticStore store = make_store(testing::fresh_dir(), 3, 6);
  ExpertCache cache(store.source, options(2));  // exactly one layer's top-2
  StreamingExpertProvider p(cache);
  p.will_acquire(0, std::vector<int32_t>{1, 3});
  expect_view(store, 0, 1, p.acquire(0, 1));
  p.release(0, 1);
  // (0,3) was announced but never acquired: the next layer needs its slot.
  p.will_acquire(1, std::vector<int32_t>{2, 4});
  expect_view(store, 1, 2, p.acquire(1, 2));
  expect_view(store, 1, 4, p.acquire(1, 4));
  p.release(1, 2);
  p.release(1, 4);
}

TEST(StreamProvider, AbandonAfterAFailedStepFreesEveryPin) {
  const SyntheticStore store = make_store(testing::fresh_dir(), 3, 6);
  store.flip_byte(0, 4, 17);
  ExpertCache cache(store.source, options(2));
  StreamingExpertProvider p(cache);
  p.will_acquire(0, std::vector<int32_t>{2, 4});
  expect_view(store, 0, 2, p.acquire(0, 2));
  df::testing::expect_error([&] { p.acquire(0, 4); }, {"MoE layer 0 expert 4", "checksum mismatch"});
  p.abandon();
  p.will_acquire(1, std::vector<int32_t>{0, 1});
  expect_view(store, 1, 0, p.acquire(1, 0));
  expect_view(store, 1, 1, p.acquire(1, 1));
}

TEST(StreamProvider, AUnionLargerThanTheCacheIsStillServed) {
  const SyntheticStore store = make_store(testing::fresh_dir(), 3, 6);
  ExpertCache cache(store.source, options(3));
  StreamingExpertProvider p(cache);
  const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5};  // a prefill chunk that routes to every expert
  p.will_acquire(2, all);
  for (int32_t e : all) {
    expect_view(store, 2, e, p.acquire(2, e));
    p.release(2, e);
  }
  EXPECT_EQ(cache.telemetry().layers[2].reads, 6u);  // each expert read once for the chunk
}

experts::ExpertLayout model_layout(int n_layers, GgmlType down_type) {
  experts::ExpertLayout m;
  for (int i = 0; i < n_layers; ++i) {
    experts::ExpertLayerLayout l;
    l.model_layer = i + 1;
    l.n_expert = 6;
    l.n_embd = 16;
    l.n_ff = 32;
    l.down_type = down_type;
    m.layers.push_back(l);
  }
  return m;
}

TEST(StreamProvider, StoreLayoutMustMatchTheModel) {
  const SyntheticStore store = make_store(testing::fresh_dir(), 3, 6);
  EXPECT_NO_THROW(check_layout_matches(store.source.layout, model_layout(3, GgmlType::F32), "/s"));
  df::testing::expect_error(
      [&] { check_layout_matches(store.source.layout, model_layout(2, GgmlType::F32), "/s"); },
      {"/s: the store has 3 MoE layers, the model 2; re-run diskformer ingest"});
  try {
    check_layout_matches(store.source.layout, model_layout(3, GgmlType::F16), "/s");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MoE layer 0 down rows"), std::string::npos) << e.what();
  }
}

// Gate and up fused in one tensor (ffn_gate_up_exps: gate rows 0..F-1, up rows F..2F-1 of each expert's slab)
// have the bytes and types of separate ones: the rows the records were cut from must agree as well.
TEST(StreamProvider, StoreAndModelMustAgreeOnFusedGateUpRows) {
  const SyntheticStore store = make_store(testing::fresh_dir(), 3, 6);  // separate gate and up
  store::Layout fused_store = store.source.layout;
  experts::ExpertLayout fused_model = model_layout(3, GgmlType::F32);
  for (size_t i = 0; i < fused_store.layers.size(); ++i) {
    store::MoeLayerLayout& sl = fused_store.layers[i];
    sl.up.tensor = sl.gate.tensor = "blk." + std::to_string(sl.layer) + ".ffn_gate_up_exps.weight";
    sl.up.first_row = sl.up.n_out;
    experts::ExpertLayerLayout& ml = fused_model.layers[i];
    ml.up_name = ml.gate_name = sl.gate.tensor;
    ml.up_row0 = ml.n_ff;
  }
  EXPECT_NO_THROW(check_layout_matches(fused_store, fused_model, "/s"));
  df::testing::expect_error([&] { check_layout_matches(store.source.layout, fused_model, "/s"); },
                            {"/s: MoE layer 0 up rows start at row 0 of each expert's slab of "
                             "'blk.1.ffn_up_exps.weight' in the store, at row 32 in the model",
                             "re-run diskformer ingest"});
  df::testing::expect_error([&] { check_layout_matches(fused_store, model_layout(3, GgmlType::F32), "/s"); },
                            {"/s: MoE layer 0 up rows start at row 32 of each expert's slab of "
                             "'blk.1.ffn_gate_up_exps.weight' in the store, at row 0 in the model"});
}

// A model that does not run its file's trailing blocks (hy_v3's MTP blocks) takes a store that holds their
// experts after its own; the blocks must still line up.
TEST(StreamProvider, StoreMayHoldTheExpertsOfTrailingBlocksTheModelDoesNotRun) {
  const SyntheticStore store = make_store(testing::fresh_dir(), 3, 6);  // blocks 1, 2, 3
  experts::ExpertLayout two = model_layout(2, GgmlType::F32);           // blocks 1, 2
  two.unrun_from_layer = 3;
  EXPECT_NO_THROW(check_layout_matches(store.source.layout, two, "/s"));
  two.unrun_from_layer = 4;  // block 3 is the model's to run, and it lacks it
  df::testing::expect_error([&] { check_layout_matches(store.source.layout, two, "/s"); },
                            {"/s: the store has 3 MoE layers, the model 2; re-run diskformer ingest"});
  experts::ExpertLayout shifted = model_layout(3, GgmlType::F32);
  for (auto& l : shifted.layers) l.model_layer += 1;  // blocks 2, 3, 4
  df::testing::expect_error([&] { check_layout_matches(store.source.layout, shifted, "/s"); },
                            {"/s: MoE layer 0 is block 1 in the store, block 2 in the model"});
}

}  // namespace
}  // namespace df::stream

// The memory plan (engine/memory_plan.h): the reserve beside the expert cache is computed from the model's
// sizes, the context (ModelSourceOptions::n_ctx, -c) and the threads, on a given memory snapshot, without
// allocating; contexts the model or the memory cannot hold are refused with what is needed and what there is.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/memory_plan.h"
#include "engine/model_source.h"
#include "gguf/gguf.h"
#include "util/error.h"

namespace df {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20, kGiB = uint64_t{1} << 30;

std::string golden(const char* name) { return std::string(DF_GOLDEN_DIR) + "/" + name + ".gguf"; }

const gguf::File& tiny() {
  static const gguf::File f = gguf::File::open(golden("lfm2moe-tiny"));
  return f;
}

// A streaming request on the tiny model's sizes with made-up records: 1 MiB each, 4096 of them, top-2.
MemoryPlanInput streaming(int n_ctx, int threads = 2) {
  MemoryPlanInput in = memory_plan_input(tiny(), n_ctx, 64, threads);
  in.record_bytes = kMiB;
  in.total_records = 4096;
  in.min_records = 2;
  return in;
}

stream::MemorySnapshot memory(uint64_t available) {
  stream::MemorySnapshot m;
  m.mem_available = available;
  return m;
}

std::string error_of(const MemoryPlanInput& in, const stream::MemorySnapshot& m) {
  try {
    plan_memory(in, m);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MemoryPlan, TheContextFeedsTheReserve) {
  const auto m = memory(3 * kGiB);
  const MemoryPlan small = plan_memory(streaming(256), m), large = plan_memory(streaming(4096), m);
  EXPECT_GT(large.reserve.state, small.reserve.state);
  EXPECT_GT(large.reserve.total(), small.reserve.total());
  // Same snapshot, larger context: a smaller automatic budget, by the whole difference in the reserve.
  EXPECT_TRUE(small.cache.automatic);
  EXPECT_LT(large.cache.slots, small.cache.slots);
  EXPECT_GE((small.cache.slots - large.cache.slots + 1) * kMiB,
            large.reserve.total() - small.reserve.total());
  // The reserve counts the trunk's tensors (no routed expert), the state and the threads' stacks.
  EXPECT_GT(small.reserve.trunk, 0u);
  EXPECT_EQ(small.reserve.stacks, static_cast<uint64_t>(2 + kOtherThreads) * streaming(256).stack_bytes);
  EXPECT_GT(plan_memory(streaming(256, 8), m).reserve.stacks, small.reserve.stacks);
}

TEST(MemoryPlan, TheDescriptionNamesTheReserve) {
  const MemoryPlan p = plan_memory(streaming(1024), memory(3 * kGiB));
  for (const char* part : {"auto", "reserve", "trunk", "state", "thread stacks", "kept free"})
    EXPECT_NE(p.description.find(part), std::string::npos) << part << " in: " << p.description;
}

TEST(MemoryPlan, AnExplicitBudgetIsHonoured) {
  for (int n_ctx : {256, 4096}) {
    MemoryPlanInput in = streaming(n_ctx);
    in.expert_cache_bytes = 100 * kMiB;
    const MemoryPlan p = plan_memory(in, memory(3 * kGiB));
    EXPECT_FALSE(p.cache.automatic);
    EXPECT_EQ(p.cache.slots, 100u);
    EXPECT_TRUE(p.warning.empty()) << p.warning;
  }
  // More than memory holds: honoured, with a warning that says so.
  MemoryPlanInput in = streaming(256);
  in.expert_cache_bytes = 4 * kGiB;
  const MemoryPlan p = plan_memory(in, memory(2 * kGiB));
  EXPECT_EQ(p.cache.slots, 4096u);
  EXPECT_NE(p.warning.find("OOM"), std::string::npos) << p.warning;
}

TEST(MemoryPlan, RefusesAContextBeyondTheTrainingContext) {
  ASSERT_EQ(streaming(4096).n_ctx_train, 4096);
  const std::string e = error_of(streaming(4097), memory(64 * kGiB));
  EXPECT_NE(e.find("-c 4097"), std::string::npos) << e;
  EXPECT_NE(e.find("4096 tokens the model was trained for"), std::string::npos) << e;
}

TEST(MemoryPlan, RefusesAContextMemoryCannotHoldSayingNeededAndUsable) {
  MemoryPlanInput in = streaming(100000000);
  in.n_ctx_train = 0;  // unknown: only memory decides
  ASSERT_GT(in.state_bytes, 10 * kGiB);
  stream::MemorySnapshot m = memory(20 * kGiB);
  m.cgroup_limit = 8 * kGiB;
  m.cgroup_usage = kGiB;
  const std::string e = error_of(in, m);
  EXPECT_NE(e.find("context 100000000 needs"), std::string::npos) << e;
  EXPECT_NE(e.find("only 7.00 GiB is usable"), std::string::npos) << e;
  EXPECT_NE(e.find("cgroup limit 8.00 GiB"), std::string::npos) << e;
  // Resident experts count in full.
  MemoryPlanInput r = memory_plan_input(tiny(), 256, 64, 2);
  r.resident = true;
  r.resident_expert_bytes = 30 * kGiB;
  EXPECT_NE(error_of(r, memory(20 * kGiB)).find("the resident experts"), std::string::npos);
}

// open_model: -c reaches the plan (ModelSourceOptions::n_ctx), on an injected snapshot.
TEST(MemoryPlan, OpenModelPlansForTheOptionsContext) {
  const std::string store = std::string(DF_TEST_TMP) + "/store";
  std::filesystem::remove_all(store);
  ModelSourceOptions o;
  o.path = golden("lfm2moe-tiny");
  o.store_dir = store;
  o.notice = [](const std::string&) {};
  o.memory = memory(4 * kGiB);
  o.n_threads = 2;
  o.n_ctx = 512;
  const OpenedModel a = open_model(o);
  o.n_ctx = 4096;
  const OpenedModel b = open_model(o);
  EXPECT_EQ(a.n_ctx, 512);
  EXPECT_EQ(b.n_ctx, 4096);
  EXPECT_GT(b.reserve_bytes, a.reserve_bytes);
  EXPECT_NE(b.cache_description.find("reserve"), std::string::npos) << b.cache_description;
  o.n_ctx = 0;  // the training context, at most 4096
  EXPECT_EQ(open_model(o).n_ctx, 4096);
  o.n_ctx = 5000;
  EXPECT_THROW(open_model(o), Error);
  o.n_ctx = 512;
  o.memory = memory(64 * kMiB);  // less than the runtime alone
  try {
    open_model(o);
    ADD_FAILURE() << "opened with 64 MiB usable";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only 64.0 MiB is usable"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace df

namespace df {
namespace {

// A chat's prompt snapshot is a second state that only holds a sequence: the plan counts it at what such a
// state holds (a fresh state of the context, which never runs a batch), and grows with the context.
TEST(MemoryPlan, APromptSnapshotCountsAFreshStateOfTheContext) {
  for (int n_ctx : {64, 1024}) {
    const MemoryPlanInput one = memory_plan_input(tiny(), n_ctx, 64, 2);
    const MemoryPlanInput two = memory_plan_input(tiny(), n_ctx, 64, 2, 1);
    models::LoadOptions o;
    o.n_threads = 2;
    auto model = models::load_model(tiny(), o);
    // At least the fresh state (its KV, conv taps and attention scratch); at most a few per-batch tables more
    // (the wave and the per-expert tables, which the plan counts and a state that never runs a batch lacks).
    const uint64_t fresh = model->new_state(n_ctx)->bytes();
    EXPECT_GE(two.state_bytes - one.state_bytes, fresh) << n_ctx;
    EXPECT_LE(two.state_bytes - one.state_bytes, fresh + 4096) << n_ctx;
  }
}

// The automatic device tier: every record when they fit, else the free memory less what is kept for the
// state (1 GiB, or a tenth when that is more); one card named for two stages gives the first tier half of
// what is usable, so that the second stage's trunk and tier still fit; too little memory names the device.
TEST(MemoryPlan, TheAutomaticDeviceTierSharesACardNamedTwice) {
  EXPECT_EQ(automatic_device_slots(40 * kGiB, 100, kGiB, 4, 1, "cuda:0"), 36u);  // 40 - 4 (a tenth)
  EXPECT_EQ(automatic_device_slots(40 * kGiB, 20, kGiB, 4, 1, "cuda:0"), 20u);   // every record fits
  EXPECT_EQ(automatic_device_slots(5 * kGiB, 100, kGiB, 4, 1, "cuda:0"), 4u);    // 5 - 1 GiB kept
  EXPECT_EQ(automatic_device_slots(40 * kGiB, 100, kGiB, 4, 2, "cuda:0"), 18u);  // half of 36
  // The second stage, after the first took its half and loaded its trunk (2 GiB): the rest is its own.
  EXPECT_EQ(automatic_device_slots(40 * kGiB - 18 * kGiB - 2 * kGiB, 100, kGiB, 4, 1, "cuda:0"), 18u);
  try {
    (void)automatic_device_slots(8 * kGiB, 100, kGiB, 4, 2, "cuda:1");
    ADD_FAILURE() << "7 GiB usable shared by two tiers of 4 GiB at least was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--device cuda:1"), std::string::npos) << what;
    EXPECT_NE(what.find("shared by the 2 tiers"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace df

// Hard limits at the command line: a context beyond the training context or beyond memory is refused with
// what is needed and what there is, before anything is allocated or ingested (it once ended in
// "std::bad_alloc"); -t above the CPUs this process may use is said, not silently slow.
#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <string>

#include "cli_run.h"

namespace df {
namespace {

using testing::run_cli;

const std::string tiny = std::string(DF_GOLDEN_DIR) + "/lfm2moe-tiny.gguf";
std::string tmp(const std::string& name) {
  std::filesystem::create_directories(DF_TEST_TMP);
  return std::string(DF_TEST_TMP) + "/" + name;
}

TEST(CliLimits, AContextBeyondTheTrainingContextIsRefusedBeforeTheIngest) {
  const std::string store = tmp("store-ctx");
  std::filesystem::remove_all(store);
  for (const std::string cmd : {"run -p hi", "chat"}) {
    auto r = run_cli(cmd + " -m " + tiny + " --store " + store + " -c 100000000 </dev/null");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("-c 100000000 is larger than the 4096 tokens the model was trained for"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("bad_alloc"), std::string::npos) << r.out;
    // Nothing was done: no store made, no cache chosen.
    EXPECT_FALSE(std::filesystem::exists(store)) << cmd;
    EXPECT_EQ(r.out.find("expert cache"), std::string::npos) << r.out;
  }
}

// A model trained for 2^24 positions with wide KV rows: -c 16M needs ~0.5 TB of KV cache.
TEST(CliLimits, AContextMemoryCannotHoldIsRefusedSayingNeededAndAvailable) {
  const std::string model = tmp("long-ctx.gguf"), store = tmp("store-mem");
  std::filesystem::remove_all(store);
  auto made = run_cli(
      "make-model --arch lfm2moe --preset tiny --layers 2 --attn-layers 0,1 --hidden 4096 --heads 32 "
      "--kv-heads "
      "32 --dense-lead 0 --experts 4 --topk 2 --expert-ff 64 --vocab 1000 --ctx 16777216 -q -o '" +
      model + "'");
  ASSERT_EQ(made.status, 0) << made.out;
  for (const std::string& extra : {std::string(" --store ") + store, std::string(" --resident")}) {
    auto r = run_cli("run -m '" + model + "'" + extra + " -p hi -c 16000000");
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("error: context 16000000 needs"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("is usable (MemAvailable"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("bad_alloc"), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(store));
  }
  auto b = run_cli("bench -m '" + model + "' --store " + store + " -p 4 -n 2 -c 16000000");
  EXPECT_EQ(b.status, 0) << b.out;  // bench plans for its own context (prompt + decode), not -c
}

// Runs with this process (and so the binary) pinned to one CPU.
class OneCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::sched_getaffinity(0, sizeof(saved_), &saved_), 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &saved_)) {
        CPU_SET(c, &one);
        break;
      }
    ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);
  }
  void TearDown() override { ::sched_setaffinity(0, sizeof(saved_), &saved_); }
  cpu_set_t saved_;
};

TEST_F(OneCpu, MoreThreadsThanUsableCpusAreWarnedAbout) {
  const std::string store = tmp("store-threads");
  auto r =
      run_cli("run -m " + tiny + " --store " + store + " --prompt-ids 1,2,3 -n 2 --temp 0 --print-ids -t 3");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(
      r.out.find("warning: -t 3 is more than the 1 CPU this process may use (1 CPU in the affinity mask"),
      std::string::npos)
      << r.out;
  auto ok =
      run_cli("run -m " + tiny + " --store " + store + " --prompt-ids 1,2,3 -n 2 --temp 0 --print-ids -t 1");
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_EQ(ok.out.find("warning: -t"), std::string::npos) << ok.out;
  auto bench = run_cli("bench -m " + tiny + " --store " + store + " -p 4 -n 2 -t 2");
  EXPECT_NE(bench.out.find("warning: -t 2 is more than the 1 CPU"), std::string::npos) << bench.out;
}

TEST(CliLimits, NegativeThreadsAreRefused) {
  auto r = run_cli("run -m " + tiny + " -p hi -t -2");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("-t -2"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace df

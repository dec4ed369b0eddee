// --record-routing on the decode path allocates nothing: once the recorder exists, writing rows (through its
// fixed buffer and the file's, flushed as they fill) makes no new/delete; finish() then writes the CSV whole.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "counting_operator_new.h"
#include "engine/routing_recorder.h"
#include "stream/routing_trace.h"

namespace {

TEST(EngineRecorder, RowsAreWrittenWithoutAllocatingAndReadBackAsTheyWereRouted) {
  std::filesystem::create_directories(DF_TEST_TMP);
  const std::string path = std::string(DF_TEST_TMP) + "/noalloc.csv";
  df::RoutingRecorder rec(path);
  rec.begin_prompt(3);
  const int32_t prompt_ids[] = {1, 2, 3, 4, 5, 6};  // 3 tokens, k = 2
  const uint64_t before = g_allocations.load();
  for (int layer = 0; layer < 4; ++layer) rec.routed(layer, 0, prompt_ids, 3, 2);
  for (int step = 0; step < 5000; ++step)  // far more than one buffer of rows
    for (int layer = 0; layer < 4; ++layer) {
      const int32_t ids[] = {step % 7, 7 + layer};
      rec.routed(layer, 3 + step, ids, 1, 2);
    }
  EXPECT_EQ(g_allocations.load() - before, 0u);
  rec.finish();
  const df::stream::RoutingTrace t = df::stream::read_routing_trace(path);
  ASSERT_EQ(t.rows(), 12u + 20000u);
  EXPECT_EQ(t.pos[0], -3);  // prompt rows -3..-1, layer by layer
  EXPECT_EQ(t.pos[2], -1);
  EXPECT_EQ(t.layer[3], 1);
  EXPECT_EQ(t.pos[12], 0);  // then decode from 0
  EXPECT_EQ(t.pos.back(), 4999);
  EXPECT_EQ(t.row_ids(12)[1], 7);
}

TEST(EngineRecorder, NothingAppearsUnderTheNameUntilFinished) {
  std::filesystem::create_directories(DF_TEST_TMP);
  const std::string path = std::string(DF_TEST_TMP) + "/unfinished.csv";
  std::filesystem::remove(path);
  {
    df::RoutingRecorder rec(path);
    const int32_t ids[] = {1, 2};
    rec.routed(0, 0, ids, 1, 2);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace

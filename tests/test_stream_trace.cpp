// Routing traces: the llama.cpp CSV written and read back unchanged, vLLM route logs with their warm-up
// passes dropped, and hostile files refused with the file and line named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "error_matchers.h"
#include "stream/routing_trace.h"
#include "util/error.h"

namespace df::stream {
namespace {

using df::testing::expect_error;

RoutingTrace sample() {
  RoutingTrace t;
  t.name = "sample";
  t.k = 3;
  const int32_t rows[][5] = {{-2, 0, 5, 1, 9}, {-1, 0, 2, 5, 7}, {-2, 1, 0, 3, 8}, {-1, 1, 8, 3, 1},
                             {0, 0, 7, 9, 2},  {0, 1, 3, 1, 11}, {1, 0, 2, 7, 9},  {1, 1, 3, 0, 8}};
  for (const auto& r : rows) t.add_row(r[0], r[1], std::span<const int32_t>(r + 2, 3));
  t.n_expert = 12;
  return t;
}

TEST(StreamTrace, CsvRoundTripKeepsEveryRowInOrder) {
  const RoutingTrace t = sample();
  const std::string csv = to_llama_csv(t);
  EXPECT_EQ(csv.substr(0, 24), "-2,0,5,1,9\n-1,0,2,5,7\n-2");
  const RoutingTrace back = parse_llama_csv(csv, "back.csv");
  EXPECT_EQ(back.k, 3);
  EXPECT_EQ(back.n_layers, 2);
  EXPECT_EQ(back.n_expert, 12);  // highest id + 1
  EXPECT_EQ(back.pos, t.pos);
  EXPECT_EQ(back.layer, t.layer);
  EXPECT_EQ(back.ids, t.ids);
  EXPECT_EQ(to_llama_csv(back), csv);
}

TEST(StreamTrace, ReadsAFileOfEitherFormAndToleratesHeaderBlankLinesAndCrLf) {
  const std::filesystem::path dir = std::filesystem::path(DF_TEST_TMP) / "trace";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "a.csv");
    f << "pos,layer,e1,e2\r\n-1,0,4,2\r\n\r\n0,0,2,3\r\n";
  }
  const RoutingTrace t = read_routing_trace((dir / "a.csv").string());
  ASSERT_EQ(t.rows(), 2u);
  EXPECT_TRUE(t.prompt_row(0));
  EXPECT_FALSE(t.prompt_row(1));
  EXPECT_EQ(t.ids, (std::vector<int32_t>{4, 2, 2, 3}));
  {
    std::ofstream f(dir / "b.jsonl");
    f << R"({"type": "meta", "num_experts": 64, "top_k": 2})"
      << "\n"
      << R"({"type": "route", "req_id": "r0", "token_idx": 0, "layer": 0, "topk_ids": [7, 1]})"
      << "\n";
  }
  const RoutingTrace v = read_routing_trace((dir / "b.jsonl").string());
  EXPECT_EQ(v.rows(), 1u);
  EXPECT_EQ(v.n_expert, 64);  // from the meta line
  EXPECT_THROW(read_routing_trace((dir / "missing.csv").string()), Error);
}

TEST(StreamTrace, VllmWarmUpRunsAreDropped) {
  std::string log = R"({"type":"meta","num_experts":8})"
                    "\n";
  const auto route = [](int idx, const char* ids) {
    return std::string(R"({"type":"route","token_idx":)") + std::to_string(idx) +
           R"(,"layer":0,"topk_ids":)" + ids + "}\n";
  };
  for (size_t i = 0; i < kWarmupRun; ++i) log += route(static_cast<int>(i), "[7,6]");
  log += route(0, "[1,2]") + route(1, "[2,3]") + route(2, "[2,3]");
  const RoutingTrace t = parse_vllm_jsonl(log, "v.jsonl");
  EXPECT_EQ(t.warmup_rows_dropped, kWarmupRun);
  ASSERT_EQ(t.rows(), 3u);  // a short run of identical rows is real routing and stays
  EXPECT_EQ(t.ids, (std::vector<int32_t>{1, 2, 2, 3, 2, 3}));
}

TEST(StreamTrace, MalformedRowsAreRefusedNamingFileAndLine) {
  expect_error([] { parse_llama_csv("0,0,1,2\n1,0,x,3\n", "t.csv"); }, {"t.csv:2", "'x' is not an integer"});
  expect_error([] { parse_llama_csv("0,0,1,2\n1,0,3\n", "t.csv"); }, {"t.csv:2", "1 expert ids", "have 2"});
  expect_error([] { parse_llama_csv("0,0,1,1\n", "t.csv"); }, {"t.csv:1", "expert 1 is chosen twice"});
  expect_error([] { parse_llama_csv("0,-1,1,2\n", "t.csv"); }, {"t.csv:1", "layer -1"});
  expect_error([] { parse_llama_csv("0,0,1,-2\n", "t.csv"); }, {"t.csv:1", "expert id -2"});
  expect_error([] { parse_llama_csv("0,0\n", "t.csv"); }, {"t.csv:1", "at least one expert id"});
  expect_error([] { parse_llama_csv("0,0,1,2,\n", "t.csv"); }, {"t.csv:1", "not an integer"});
  expect_error([] { parse_llama_csv("0,0,1,99999999999\n", "t.csv"); }, {"t.csv:1", "not an integer"});
  expect_error([] { parse_llama_csv("\n\n", "t.csv"); }, {"t.csv", "no routing rows"});
  expect_error([] { parse_vllm_jsonl("{\"type\":\"route\"\n", "v.jsonl"); },
               {"v.jsonl:1", "not a JSON object"});
  expect_error(
      [] { parse_vllm_jsonl(R"({"type":"route","token_idx":0,"layer":0,"topk_ids":[1,"a"]})", "v.jsonl"); },
      {"v.jsonl:1", "non-integer"});
  expect_error(
      [] {
        parse_vllm_jsonl(R"({"type":"meta","num_experts":4})"
                         "\n"
                         R"({"type":"route","token_idx":0,"layer":0,"topk_ids":[5]})",
                         "v.jsonl");
      },
      {"v.jsonl", "expert id 5", "declares 4"});
}

TEST(StreamTrace, ARowThatDoesNotFitTheBufferIsNotWrittenHalf) {
  const int32_t ids[] = {100, 200, 300};
  char buf[64];
  ASSERT_EQ(format_trace_row(buf, sizeof buf, -5, 2, ids), 17u);
  EXPECT_EQ(std::string(buf, 17), "-5,2,100,200,300\n");
  EXPECT_EQ(format_trace_row(buf, 10, -5, 2, ids), 0u);
}

}  // namespace
}  // namespace df::stream

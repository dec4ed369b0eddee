// `run --record-routing` then `diskformer replay`: the trace appears only once complete, replay reads it with
// the store's record size and ends --json with the figures; a sweep writes its table and SVG; a damaged trace
// is an error naming the file and line, with a non-zero exit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "golden_json.h"

using df::testing::golden_path;
using df::testing::run_cli;
using df::testing::run_cli_split;

namespace {

std::string last_line(const std::string& s) {
  const size_t end = s.find_last_not_of('\n');
  const size_t start = s.find_last_of('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1,
                  end - (start == std::string::npos ? 0 : start + 1) + 1);
}

TEST(CliReplay, RecordARunThenReplayItWithTheModelsRecordSize) {
  const std::string dir = std::string(DF_TEST_TMP) + "/replay";
  std::filesystem::create_directories(dir);
  const std::string trace = dir + "/run.csv", svg = dir + "/sweep.svg";
  std::filesystem::remove(trace);
  const std::string model = golden_path("lfm2moe-tiny.gguf");
  auto r =
      run_cli("run -m " + model + " --prompt-ids 1,2,3,4,5 -n 4 --temp 0 --print-ids --expert-cache 1M " +
              "--record-routing " + trace);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("routing: "), std::string::npos) << r.out;
  ASSERT_TRUE(std::filesystem::exists(trace));
  std::ifstream f(trace);
  std::string first;
  std::getline(f, first);
  EXPECT_EQ(first.rfind("-5,0,", 0), 0u) << first;  // the prompt's first position, MoE layer 0

  auto j = run_cli_split("replay " + trace + " -m " + model + " --slots 16 --json");
  ASSERT_EQ(j.status, 0) << j.err;
  const auto json = nlohmann::json::parse(last_line(j.out));
  for (const char* key : {"hit_rate", "bytes_per_token", "predicted_decode_tps", "record_bytes", "slots"})
    EXPECT_TRUE(json.contains(key)) << key << " missing in " << json.dump();
  EXPECT_EQ(json["slots"], 16);
  EXPECT_GE(json["hit_rate"].get<double>(), 0.0);
  EXPECT_LE(json["hit_rate"].get<double>(), 1.0);
  EXPECT_GT(json["bytes_per_token"].get<double>(), 0.0);
  EXPECT_NEAR(json["predicted_decode_tps"].get<double>(), 1.54e9 / json["bytes_per_token"].get<double>(),
              1e-6 * json["predicted_decode_tps"].get<double>());

  auto s = run_cli_split("replay " + trace +
                         " --record-bytes 4096 --cache-policy lru,slru,belady --sweep 8,16 --plot " + svg);
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_NE(s.out.find("belady"), std::string::npos);
  std::ifstream plot(svg);
  std::string head;
  std::getline(plot, head);
  EXPECT_EQ(head.rfind("<svg", 0), 0u);
}

// A device tier above the cache given: both tiers' figures in the JSON, the exclusive study reading no more
// from disk on this trace, and contradictory tier flags refused with a message naming them.
TEST(CliReplay, ADeviceTierAboveTheRamTierReportsBothTiers) {
  const std::string dir = std::string(DF_TEST_TMP) + "/replay";
  std::filesystem::create_directories(dir);
  const std::string trace = dir + "/tiers.csv";
  std::filesystem::remove(trace);
  const std::string model = golden_path("lfm2moe-tiny.gguf");
  auto r = run_cli("run -m " + model + " --prompt-ids 1,2,3,4,5 -n 12 --temp 0 --expert-cache 1M " +
                   "--record-routing " + trace);
  ASSERT_EQ(r.status, 0) << r.out;
  double reads[2] = {0, 0};
  for (int exclusive = 0; exclusive < 2; ++exclusive) {
    auto j = run_cli_split("replay " + trace + " -m " + model + " --slots 10 --gpu-slots 6 --ram-tier " +
                           (exclusive ? "exclusive" : "inclusive") + " --json");
    ASSERT_EQ(j.status, 0) << j.err;
    EXPECT_NE(j.out.find("device tier 6 slots"), std::string::npos) << j.out;
    const auto json = nlohmann::json::parse(last_line(j.out));
    EXPECT_EQ(json["device_slots"], 6);
    EXPECT_EQ(json["slots"], 10);
    EXPECT_EQ(json["accesses"], json["device_accesses"].get<uint64_t>() - json["device_hits"].get<uint64_t>())
        << "the RAM tier sees the device tier's misses";
    EXPECT_GT(json["copies_per_token"].get<double>(), 0.0);
    reads[exclusive] = json["reads"].get<double>();
  }
  EXPECT_LE(reads[1], reads[0]);
  for (const char* bad : {" --slots 10 --gpu-slots 6 --gpu-cache 1M", " --slots 10 --ram-tier exclusive",
                          " --sweep 8,16 --gpu-slots 6", " --slots 10 --gpu-slots 0"}) {
    auto e = run_cli_split("replay " + trace + " -m " + model + bad);
    EXPECT_NE(e.status, 0) << bad;
    EXPECT_TRUE(e.err.find("--gpu") != std::string::npos || e.err.find("--ram-tier") != std::string::npos)
        << bad << ": " << e.err;
  }
}

TEST(CliReplay, ADamagedTraceIsAnErrorNamingFileAndLine) {
  const std::string dir = std::string(DF_TEST_TMP) + "/replay";
  std::filesystem::create_directories(dir);
  const std::string trace = dir + "/bad.csv";
  {
    std::ofstream f(trace);
    f << "-1,0,1,2\n0,0,3,oops\n";
  }
  auto r = run_cli_split("replay " + trace + " --slots 8");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("bad.csv:2"), std::string::npos) << r.err;
  auto none = run_cli_split("replay " + trace);
  EXPECT_NE(none.status, 0);
}

}  // namespace

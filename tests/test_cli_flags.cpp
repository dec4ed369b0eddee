
// The streaming flags of run and bench, end to end through the binary: each setting is shown to take effect
// (what the expert cache reports, where the store goes, what bench --json says ran) and none changes the
// output: on the F16 golden model every combination reproduces llama.cpp's greedy ids exactly. Plus bench's
// JSON fields, which scripts read, and a damaged store through `run`.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_run.h"
#include "golden_json.h"
#include "read_ahead_rule.h"

namespace fs = std::filesystem;
using df::testing::golden_json;
using df::testing::golden_path;
using df::testing::join;
using df::testing::parse_ids;
using df::testing::run_cli_split;
using nlohmann::json;

namespace {

std::string scratch(const std::string& name) {
  const std::string dir = std::string(DF_TEST_TMP) + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(fs::path(dir).parent_path());
  return dir;
}

json manifest(const std::string& store) {
  std::ifstream in(store + "/manifest.json");
  return json::parse(in);
}

// The last line of bench --json's stdout.
json bench_json(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  const size_t begin = out.rfind('\n', end);
  return json::parse(out.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin + 1)));
}

}  // namespace

// llama.cpp's 32 greedy ids of the F16 model (exact by the golden rule) under every streaming setting, each
// shown to have taken effect in what the run printed and wrote.
TEST(CliFlags, EveryStreamingSettingTakesEffectAndGivesLlamaCppsExactIds) {
  const auto j = golden_json("lfm2moe-tiny-f16");
  const auto& gen = j["generation"][0];
  const std::string base = "run -m " + golden_path("lfm2moe-tiny-f16.gguf") + " --prompt-ids " +
                           join(gen["prompt_ids"].get<std::vector<int32_t>>(), ",") +
                           " -n 32 --temp 0 --ignore-eos --print-ids -t 2";
  const auto want = gen["generated_ids"].get<std::vector<int32_t>>();

  {
    SCOPED_TRACE("--resident");
    auto r = run_cli_split(base + " --resident");
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(parse_ids(r.out), want);
    EXPECT_NE(r.err.find("all resident in RAM (--resident)"), std::string::npos) << r.err;
  }

  const std::string store = scratch("flags-store");
  struct Case {
    std::string flags, policy, io;
    int lookahead;
  };
  const std::vector<Case> cases = {
      {"--cache-policy lfu --lookahead 0 --io buffered", "lfu-aging", "page cache", 0},
      {"--cache-policy lru --lookahead 2 --io direct", "lru", "O_DIRECT", 2},
      {"--cache-policy lfu --lookahead 1 --io direct", "lfu-aging", "O_DIRECT", 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.flags);
    // Five records: more than one layer's top-4, far fewer than the 16 experts x 4 MoE layers.
    std::string budget = "1M";
    if (fs::exists(store + "/manifest.json"))
      budget = std::to_string(5 * manifest(store)["layout"]["record_bytes"].get<uint64_t>());
    auto r = run_cli_split(base + " --store " + store + " --expert-cache " + budget + " --stats " + c.flags);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(parse_ids(r.out), want);
    // --store: the store is where it was asked to be, complete.
    ASSERT_TRUE(fs::exists(store + "/manifest.json")) << r.err;
    EXPECT_TRUE(manifest(store)["complete"].get<bool>());
    // The cache line: "5 slots x ... = ..., POLICY, READER, IO".
    EXPECT_NE(r.err.find("5 slots x "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(", " + c.policy + ", "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.io), std::string::npos) << r.err;
    // --lookahead 0 guesses nothing: the telemetry table's read-ahead column stays at 0 in every layer.
    const bool read_ahead = r.err.find("read-ahead precision 0.0% recall 0.0%") == std::string::npos;
    EXPECT_EQ(read_ahead, c.lookahead > 0) << r.err;
  }
}

// The fields that scripts (bench/scripts/*, docs/PERF.md tables) read from bench --json, with values that
// follow from the run: decode acquires k experts per MoE layer per token, bytes per token are the bytes read
// over the tokens, the effective settings are named, memory figures are plausible.
TEST(CliBench, JsonReportsWhatRanWithConsistentFigures) {
  const auto j = golden_json("lfm2moe-tiny");
  const int n_moe = static_cast<int>(j["teacher_forced"]["moe_layers"].size());
  const int k = j["model"]["shape"]["n_expert_used"];
  const std::string store = scratch("bench-store");
  const std::string tiny = golden_path("lfm2moe-tiny.gguf");
  for (int lookahead : {0, 2}) {
    SCOPED_TRACE(testing::Message() << "lookahead " << lookahead);
    auto r =
        run_cli_split("bench -m " + tiny + " --store " + store + " --expert-cache 2M -p 16 -n 8 -t 2 --json" +
                      " --cache-policy lfu --io buffered --lookahead " + std::to_string(lookahead));
    ASSERT_EQ(r.status, 0) << r.err;
    const json b = bench_json(r.out);
    EXPECT_EQ(b["arch"], "lfm2moe");
    EXPECT_EQ(b["n_prompt"], 16);
    EXPECT_EQ(b["n_decode"], 8);
    EXPECT_EQ(b["threads"], 2);
    EXPECT_EQ(b["streaming"], true);
    EXPECT_EQ(b["io"], "buffered");
    EXPECT_EQ(b["cache_policy"], "lfu-aging");
    EXPECT_EQ(b["lookahead"], lookahead);
    EXPECT_GT(b["prefill_tps"].get<double>(), 0);
    EXPECT_GT(b["decode_tps"].get<double>(), 0);
    const uint64_t record_bytes = manifest(store)["layout"]["record_bytes"];
    EXPECT_EQ(b["expert_cache_bytes"].get<uint64_t>(),
              b["expert_cache_slots"].get<uint64_t>() * record_bytes);
    EXPECT_LE(b["expert_cache_bytes"].get<uint64_t>(), uint64_t{2} << 20);
    EXPECT_GT(b["trunk_bytes"].get<uint64_t>(), 0u);
    EXPECT_GT(b["kv_bytes"].get<uint64_t>(), 0u);
    EXPECT_GT(b["peak_rss_bytes"].get<uint64_t>(), b["trunk_bytes"].get<uint64_t>());

    const json& dec = b["decode_telemetry"];
    EXPECT_EQ(dec["tokens"], 8);
    EXPECT_EQ(b["prefill_telemetry"]["tokens"], 16);
    EXPECT_EQ(dec["total"]["accesses"].get<int>(), 8 * n_moe * k);
    EXPECT_EQ(dec["layers"].size(), static_cast<size_t>(n_moe));
    EXPECT_DOUBLE_EQ(b["bytes_per_token"].get<double>(), dec["total"]["bytes_read"].get<double>() / 8);
    EXPECT_DOUBLE_EQ(b["hit_rate"].get<double>(),
                     dec["total"]["hits"].get<double>() / dec["total"]["accesses"].get<double>());
    uint64_t rounds = 0;
    const std::vector<int> moe_layers = j["teacher_forced"]["moe_layers"].get<std::vector<int>>();
    for (int l = 0; l < n_moe; ++l)
      rounds += 8u * static_cast<uint64_t>(df::testing::guess_rounds_per_forward(moe_layers, l, lookahead));
    EXPECT_EQ(dec["total"]["prefetch_rounds"].get<uint64_t>(), rounds);
    for (const char* field : {"cache_hit_rate", "io_wait_share", "read_bandwidth", "prefetch_precision",
                              "prefetch_recall", "load_seconds", "repeats", "cold", "model"})
      EXPECT_TRUE(b.contains(field)) << field;
  }
  auto r = run_cli_split("bench -m " + tiny + " --resident -p 8 -n 4 -r 3 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const json b = bench_json(r.out);
  // Each repetition's rates, and the headline figures are their token-weighted totals (between their min and
  // max).
  ASSERT_EQ(b["decode_tps_each"].size(), 3u);
  ASSERT_EQ(b["prefill_tps_each"].size(), 3u);
  const auto each = b["decode_tps_each"].get<std::vector<double>>();
  EXPECT_GE(b["decode_tps"].get<double>(), *std::min_element(each.begin(), each.end()) * (1 - 1e-9));
  EXPECT_LE(b["decode_tps"].get<double>(), *std::max_element(each.begin(), each.end()) * (1 + 1e-9));
  EXPECT_NE(r.out.find("repetitions  prefill"), std::string::npos) << r.out;
  EXPECT_EQ(b["streaming"], false);
  EXPECT_EQ(b["io"], "none");
  EXPECT_EQ(b["hit_rate"], 1.0);
  EXPECT_EQ(b["bytes_per_token"], 0);
}

// `run` on a store with damaged records (one flipped byte in every expert of the first MoE layer, so that any
// prompt meets one): a non-zero exit, an error naming the record and its bytes, and nothing on stdout that
// could be taken for output (machine mode prints no ids; text mode only the echoed prompt).
TEST(CliRun, ADamagedStoreFailsWithTheRecordNamedAndNoOutput) {
  const auto j = golden_json("lfm2moe-tiny");
  const auto prompt = j["teacher_forced"]["tokens"].get<std::vector<int32_t>>();
  const int n_expert = j["model"]["shape"]["n_expert"];
  const std::string store = scratch("damaged-store");
  auto ingest = run_cli_split("ingest " + golden_path("lfm2moe-tiny.gguf") + " -o " + store);
  ASSERT_EQ(ingest.status, 0) << ingest.err;
  const uint64_t record_bytes = manifest(store)["layout"]["record_bytes"];
  {
    std::fstream f(store + "/experts.bin", std::ios::in | std::ios::out | std::ios::binary);
    for (int e = 0; e < n_expert; ++e) {
      const auto at = static_cast<std::streamoff>(static_cast<uint64_t>(e) * record_bytes + 64);
      char c = 0;
      f.seekg(at);
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x01);
      f.seekp(at);
      f.write(&c, 1);
    }
  }
  // "error: STORE/experts.bin: MoE layer 0 expert E (bytes E*R..(E+1)*R): checksum mismatch ..."
  auto expect_record_named = [&](const std::string& err) {
    const std::string head = "error: " + store + "/experts.bin: MoE layer 0 expert ";
    const size_t at = err.find(head);
    ASSERT_NE(at, std::string::npos) << err;
    const int e = std::stoi(err.substr(at + head.size()));
    ASSERT_GE(e, 0);
    ASSERT_LT(e, n_expert);
    const uint64_t begin = static_cast<uint64_t>(e) * record_bytes;
    EXPECT_NE(err.find(head + std::to_string(e) + " (bytes " + std::to_string(begin) + ".." +
                       std::to_string(begin + record_bytes) + "): checksum mismatch"),
              std::string::npos)
        << err;
  };
  auto ids =
      run_cli_split("run -m " + store + " --prompt-ids " + join(prompt, ",") + " -n 4 --temp 0 --print-ids");
  EXPECT_NE(ids.status, 0);
  EXPECT_EQ(ids.out, "");
  expect_record_named(ids.err);

  auto text = run_cli_split("run -m " + store + " -p 'Hello world' -n 4 --temp 0 --lookahead 0");
  EXPECT_NE(text.status, 0);
  EXPECT_EQ(text.out, "Hello world");  // the echo of the prompt, nothing generated after it
  expect_record_named(text.err);

  auto verify = run_cli_split("verify " + store);
  EXPECT_NE(verify.status, 0);
  const int n_moe = static_cast<int>(j["teacher_forced"]["moe_layers"].size());
  EXPECT_NE(
      verify.err.find(std::to_string(n_expert) + " of " + std::to_string(n_expert * n_moe) +
                      " records in experts.bin do not match their checksums; the first: the record of MoE "
                      "layer 0 (blk.2), expert 0, bytes [0, " +
                      std::to_string(record_bytes) + ")"),
      std::string::npos)
      << verify.err;
}

// --cpu-misses only means something for a GPU's tier of the expert cache: on the CPU, or with every expert
// resident, it is refused before anything loads.
TEST(CliFlags, CpuMissesWithoutAGpuTierIsAClearError) {
  for (const char* flags : {"", " --device cuda --resident"}) {
    auto r = run_cli_split("run -m " + golden_path("lfm2moe-tiny.gguf") + flags + " --cpu-misses -p hi -n 1");
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.err.find("error: --cpu-misses"), std::string::npos) << flags << ": " << r.err;
    EXPECT_NE(r.err.find("needs --device cuda without --resident"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(CliFlags, AnUnknownOrUnbuiltDeviceIsAClearError) {
  for (const char* device : {"cuda", "npu"}) {
    auto r =
        run_cli_split("run -m " + golden_path("lfm2moe-tiny.gguf") + " --device " + device + " -p hi -n 1");
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find(std::string("error: --device ") + device), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

// The packed kernel's weight walk (weight_streams.h) changes how bytes are read, never a result: the ids with
// the other walk equal the default's; a malformed setting is refused before anything runs.
TEST(CliFlags, WeightWalkSettingsKeepTheIdsAndBadValuesAreClearErrors) {
  const std::string cmd =
      "run -m " + golden_path("lfm2moe-tiny.gguf") + " --resident -p hi -n 12 --temp 0 --print-ids";
  auto plain = run_cli_split(cmd);
  ASSERT_EQ(plain.status, 0) << plain.err;
  ::setenv("DF_Q4_0X16_STREAMS", "2", 1);
  ::setenv("DF_Q4_0X16_PREFETCH", "4096", 1);
  auto walked = run_cli_split(cmd);
  EXPECT_EQ(walked.status, 0) << walked.err;
  EXPECT_EQ(walked.out, plain.out);
  ::setenv("DF_Q4_0X16_STREAMS", "3", 1);
  auto bad_streams = run_cli_split(cmd);
  ::unsetenv("DF_Q4_0X16_STREAMS");
  ::setenv("DF_Q4_0X16_PREFETCH", "4k", 1);
  auto bad_prefetch = run_cli_split(cmd);
  ::unsetenv("DF_Q4_0X16_PREFETCH");
  EXPECT_NE(bad_streams.status, 0);
  EXPECT_NE(bad_streams.err.find("DF_Q4_0X16_STREAMS=3 is not a whole number from 1 to 2"), std::string::npos)
      << bad_streams.err;
  EXPECT_EQ(bad_streams.out, "");
  EXPECT_NE(bad_prefetch.status, 0);
  EXPECT_NE(bad_prefetch.err.find("DF_Q4_0X16_PREFETCH=4k is not a whole number"), std::string::npos)
      << bad_prefetch.err;
  EXPECT_EQ(bad_prefetch.out, "");
}

// A layer split over two devices (--devices, -ts) gives the one-device ids, resident or streamed from the
// store; bench reports each device's layers; lists that do not match the devices are clear errors with
// nothing on stdout (--gpu-cache per device: engine_tiers_rules.h, where the CPU stands in for a GPU).
TEST(CliFlags, ALayerSplitOverTwoDevicesKeepsTheIdsAndMismatchedListsAreClearErrors) {
  const std::string model = golden_path("lfm2moe-tiny.gguf");
  const std::string run = "run -m " + model + " -p hi -n 12 --temp 0 --print-ids ";
  auto one = run_cli_split(run + "--resident");
  ASSERT_EQ(one.status, 0) << one.err;
  for (const std::string flags : {"--resident --device cpu,cpu", "--devices cpu,cpu -ts 1,3",
                                  "--device cpu,cpu --expert-cache 1M --lookahead 2"}) {
    auto split = run_cli_split(run + flags);
    EXPECT_EQ(split.status, 0) << flags << ": " << split.err;
    EXPECT_EQ(split.out, one.out) << flags;
  }
  auto bench = run_cli_split("bench -m " + model + " --device cpu,cpu -ts 3,1 -p 4 -n 2 --json");
  ASSERT_EQ(bench.status, 0) << bench.err;
  EXPECT_NE(bench.out.find("\"first_layer\":0"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("\"devices\":[{"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("\"gpu_cache_bytes\":0"), std::string::npos) << bench.out;
  const std::pair<std::string, std::string> bad[] = {
      {"--device cpu,cpu -ts 1,2,3", "--tensor-split gives 3 shares for 2 devices (cpu,cpu)"},
      {"--device cpu,cpu -ts 1,x", "--tensor-split: 'x' is not a non-negative number"},
      {"--device cpu,,cpu", "an empty device name in the list"},
      {"--device cpu,gpu7", "--device gpu7: unknown device"},
      {"--device cpu,cpu -ts 1,0", "device 1 gets no layer of"},
      {"--device cuda:0,cuda:1 --gpu-cache 1G,", "--gpu-cache 1G,: an empty item in the list"}};
  for (const auto& [flags, message] : bad) {
    auto r = run_cli_split(run + flags);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.err.find(message), std::string::npos) << flags << ": " << r.err;
    EXPECT_EQ(r.out, "") << flags;
  }
}

TEST(CliFlags, AnExpertSplitOverTwoDevicesKeepsTheIdsAndNeedsResidentExperts) {
  const std::string model = golden_path("gpt-oss-tiny.gguf");
  const std::string run = "run -m " + model + " -p hi -n 12 --temp 0 --print-ids --resident ";
  auto one = run_cli_split(run);
  ASSERT_EQ(one.status, 0) << one.err;
  for (const std::string flags :
       {"--device cpu,cpu --split-mode expert", "--devices cpu,cpu,cpu -sm expert -ts 1,2,1"}) {
    auto split = run_cli_split(run + flags);
    EXPECT_EQ(split.status, 0) << flags << ": " << split.err;
    EXPECT_EQ(split.out, one.out) << flags;
  }
  auto bench =
      run_cli_split("bench -m " + model + " --resident --device cpu,cpu -sm expert -ts 3,1 -p 4 -n 2 --json");
  ASSERT_EQ(bench.status, 0) << bench.err;
  EXPECT_NE(bench.out.find("\"split_mode\":\"expert\""), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("\"first_expert\":0"), std::string::npos) << bench.out;
  const std::pair<std::string, std::string> bad[] = {
      {"run -m " + model + " -p hi -n 2 --device cpu,cpu --split-mode expert",
       "--split-mode expert keeps every expert resident, spread over the devices: add --resident"},
      {run + "--device cpu,cpu --split-mode rows", "--split-mode: rows not in {layer,expert}"},
      {run + "--device cpu,cpu -sm expert -ts 1,0", "expert split: device 1 gets no expert of"}};
  for (const auto& [command, message] : bad) {
    auto r = run_cli_split(command);
    EXPECT_NE(r.status, 0) << command;
    EXPECT_NE(r.err.find(message), std::string::npos) << command << ": " << r.err;
    EXPECT_EQ(r.out, "") << command;
  }
}

// Streaming never changes the output: the logits of a model whose experts stream from an expert store through a
// budgeted cache are bit-identical to the all-resident model's, for every budget from the minimum (one layer's
// top-k) upward, both eviction policies, read-ahead 0/1/2, and direct and buffered reads. Plus faults through
// the whole engine: a damaged store is an error naming the record, never wrong output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/model_source.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "golden_json.h"
#include "store/ingest.h"
#include "util/error.h"

namespace fs = std::filesystem;
using df::testing::golden_json;
using df::testing::golden_path;

namespace {

constexpr int kDecodeSteps = 6;

// Teacher-forced prompt in chunks of `chunk`, then a few greedy decode steps: every logit of the run.
std::vector<float> run_logits(df::OpenedModel& m, const std::vector<int32_t>& prompt) {
  df::Session s(*m.model, 128, m.prefill_chunk);
  s.on_step = [&m](uint64_t t, uint64_t ns) { m.on_step(t, ns); };
  std::vector<float> all;
  auto logits = s.prefill(prompt);
  all.insert(all.end(), logits.begin(), logits.end());
  for (int i = 0; i < kDecodeSteps; ++i) {
    logits = s.decode(df::Sampler::argmax(logits));
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

std::string ingest_once(const std::string& model) {
  const std::string dir = std::string(DF_TEST_TMP) + "/streaming-stores/" + model;
  df::store::IngestOptions o;
  o.output_dir = dir;
  o.use_index = false;
  o.wait_for_lock = true;  // tests of this file run in parallel processes and share the stores
  return df::store::resolve_store(golden_path(model + ".gguf"), o);
}

df::ModelSourceOptions options_for(const std::string& path) {
  df::ModelSourceOptions o;
  o.path = path;
  o.n_threads = 2;
  o.prefill_chunk = 16;
  o.notice = [](const std::string&) {};
  return o;
}

}  // namespace

class StreamingGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(StreamingGolden, LogitsBitIdenticalToResidentForEveryBudgetPolicyLookaheadAndIoMode) {
  const std::string model = GetParam();
  auto j = golden_json(model);
  const std::vector<int32_t> prompt = j["teacher_forced"]["tokens"];
  const int top_k = j["model"]["shape"]["n_expert_used"], n_expert = j["model"]["shape"]["n_expert"];

  auto resident_opts = options_for(golden_path(model + ".gguf"));
  resident_opts.resident = true;
  df::OpenedModel resident = df::open_model(resident_opts);
  const std::vector<float> expected = run_logits(resident, prompt);
  const int n_moe = static_cast<int>(resident.model->info().moe_layers.size());

  const std::string store = ingest_once(model);
  uint64_t record_bytes = 0;
  {
    df::OpenedModel probe = df::open_model(options_for(store));
    record_bytes = probe.store->layout().record_bytes;
  }
  const std::vector<uint64_t> budgets = {static_cast<uint64_t>(top_k), static_cast<uint64_t>(2 * top_k + 1),
                                         static_cast<uint64_t>(n_expert), static_cast<uint64_t>(n_expert * n_moe)};
  int runs = 0;
  for (uint64_t slots : budgets)
    for (const char* policy : {"lru", "lfu"})
      for (int lookahead : {0, 1, 2})
        for (const char* io : {"direct", "buffered"}) {
          SCOPED_TRACE(testing::Message() << model << " slots " << slots << " " << policy << " lookahead "
                                          << lookahead << " io " << io);
          auto o = options_for(store);
          o.expert_cache_bytes = slots * record_bytes;
          o.cache_policy = policy;
          o.lookahead = lookahead;
          o.io = io;
          df::OpenedModel m = df::open_model(o);
          ASSERT_NE(m.cache, nullptr);
          EXPECT_EQ(m.cache->slots(), slots);
          const std::vector<float> got = run_logits(m, prompt);
          ASSERT_EQ(got.size(), expected.size());
          EXPECT_TRUE(got == expected) << "logits differ from the all-resident run";
          const auto tel = m.cache->telemetry();
          EXPECT_GT(tel.total.accesses, 0u);
          if (slots < static_cast<uint64_t>(n_expert * n_moe)) {
            EXPECT_GT(tel.total.reads, 0u);
          }
          ++runs;
        }
  EXPECT_EQ(runs, 48);
}

INSTANTIATE_TEST_SUITE_P(Golden, StreamingGolden,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-medium", "lfm2moe-tiny-f16", "qwen3moe-tiny",
                                           "gpt-oss-tiny"));

TEST(StreamingFaults, AFlippedByteInARecordIsAnErrorNamingTheRecord) {
  const std::string src = ingest_once("lfm2moe-tiny");
  const std::string dir = std::string(DF_TEST_TMP) + "/streaming-stores/flipped";
  fs::remove_all(dir);
  fs::copy(src, dir, fs::copy_options::recursive);
  {
    std::fstream f(dir + "/experts.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5 * 4096 + 100);  // inside the first MoE layer's records
    char c = 0;
    f.read(&c, 1);
    f.seekp(5 * 4096 + 100);
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  }
  auto o = options_for(dir);
  o.lookahead = 0;
  df::OpenedModel m = df::open_model(o);
  df::Session s(*m.model, 64, 16);
  s.on_failure = [&m] { m.on_failure(); };
  auto j = golden_json("lfm2moe-tiny");
  const std::vector<int32_t> prompt = j["teacher_forced"]["tokens"];
  try {
    s.prefill(prompt);
    FAIL() << "a damaged record was used";
  } catch (const df::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("experts.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expert"), std::string::npos) << msg;
    EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;
  }
  EXPECT_TRUE(s.tokens().empty());  // the failed step left nothing that looks evaluated
}

TEST(StreamingFaults, AStoreOfAnotherModelOrATruncatedStoreIsRefused) {
  const std::string src = ingest_once("lfm2moe-tiny");
  const std::string dir = std::string(DF_TEST_TMP) + "/streaming-stores/truncated";
  fs::remove_all(dir);
  fs::copy(src, dir, fs::copy_options::recursive);
  fs::resize_file(dir + "/experts.bin", fs::file_size(dir + "/experts.bin") - 4096);
  try {
    df::open_model(options_for(dir));
    FAIL() << "a truncated store was opened";
  } catch (const df::Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.bin"), std::string::npos) << e.what();
  }
  // --store pointing at another model's store: the source check refuses it.
  const std::string other = ingest_once("lfm2moe-tiny-f16");
  auto o = options_for(golden_path("lfm2moe-tiny.gguf"));
  o.store_dir = other;
  EXPECT_THROW(df::open_model(o), df::Error);
}

TEST(StreamingBudget, ABudgetBelowOneLayersTopKIsRefused) {
  const std::string store = ingest_once("lfm2moe-tiny");
  auto o = options_for(store);
  o.expert_cache_bytes = 4096;
  try {
    df::open_model(o);
    FAIL() << "a budget of one page was accepted";
  } catch (const df::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert"), std::string::npos) << e.what();
  }
}

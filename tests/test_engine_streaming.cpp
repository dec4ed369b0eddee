// Streaming never changes the output: every logit row of every position, the residual stream after every
// layer and every routing decision of a model whose experts stream from an expert store through a budgeted
// cache are bit-identical (memcmp: -0/+0 and NaN payloads count) to the all-resident model's, for every
// budget from the minimum (one layer's top-k) upward, every eviction policy, read-ahead 0/1/2, and direct
// and buffered reads. Each configuration is shown to have taken effect (policy, I/O path, slots, read-ahead
// rounds). Plus faults through the whole engine: a damaged store or a failed read is an error naming the
// record, never wrong output, and a transient fault leaves a session that computes the right bits on the
// retry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "engine/model_source.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "error_matchers.h"
#include "golden_json.h"
#include "read_ahead_rule.h"
#include "store/ingest.h"
#include "stream/eviction_policy.h"
#include "streaming_rows.h"
#include "util/error.h"

namespace fs = std::filesystem;
using df::testing::expect_error;
using df::testing::golden_json;
using df::testing::golden_path;
using df::testing::guess_rounds_per_forward;

namespace {

using namespace df::testing::rows;

}  // namespace

class StreamingGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(StreamingGolden, EveryRowAndLayerBitIdenticalToResidentForEveryBudgetPolicyLookaheadAndIoMode) {
  const std::string model = GetParam();
  const std::vector<int32_t> prompt = teacher_forced_prompt(model);

  auto resident_opts = options_for(golden_path(model + ".gguf"));
  resident_opts.resident = true;
  df::OpenedModel resident = df::open_model(resident_opts);
  const RunRecord expected = run_every_row(resident, prompt);
  const auto info = resident.model->info();
  const int n_moe = static_cast<int>(info.moe_layers.size()), top_k = info.n_expert_used;
  const uint64_t all_records = static_cast<uint64_t>(info.n_expert) * static_cast<uint64_t>(n_moe);
  // The records this sequence needs: every config must read each of them at least once.
  std::set<int64_t> needed;
  {
    const size_t per_layer = expected.expert_ids.size() / static_cast<size_t>(n_moe);
    for (size_t i = 0; i < expected.expert_ids.size(); ++i)
      needed.insert(static_cast<int64_t>(i / per_layer) * info.n_expert + expected.expert_ids[i]);
  }

  const std::string store = ingest_once(model);
  uint64_t record_bytes = 0;
  {
    df::OpenedModel probe = df::open_model(options_for(store));
    record_bytes = probe.store->layout().record_bytes;
  }
  const std::vector<uint64_t> budgets = {static_cast<uint64_t>(top_k), static_cast<uint64_t>(2 * top_k + 1),
                                         static_cast<uint64_t>(info.n_expert), all_records};
  for (uint64_t slots : budgets)
    for (const char* policy : df::stream::policy_names())
      for (int lookahead : {0, 1, 2})
        for (const char* io : {"direct", "buffered"}) {
          // The I/O path and the policy are independent: the newer policies run with direct reads only,
          // which keeps this test's time in bounds.
          const bool first_two = std::string(policy) == "lru" || std::string(policy) == "lfu";
          if (!first_two && std::string(io) == "buffered") continue;
          SCOPED_TRACE(testing::Message() << model << " slots " << slots << " " << policy << " lookahead "
                                          << lookahead << " io " << io);
          auto o = options_for(store);
          o.expert_cache_bytes = slots * record_bytes;
          o.cache_policy = policy;
          o.lookahead = lookahead;
          o.io = io;
          std::vector<std::string> notices;
          o.notice = [&notices](const std::string& s) { notices.push_back(s); };
          df::OpenedModel m = df::open_model(o);
          ASSERT_NE(m.cache, nullptr);

          // The settings took effect: the budget's slots and no byte more, the policy, the I/O path.
          EXPECT_EQ(m.cache->slots(), slots);
          EXPECT_EQ(m.cache->pool_bytes(), slots * record_bytes);
          EXPECT_STREQ(m.cache->policy_name(), std::string(policy) == "lfu" ? "lfu-aging" : policy);
          const bool fell_back = std::any_of(notices.begin(), notices.end(), [](const std::string& s) {
            return s.find("refuses O_DIRECT") != std::string::npos;
          });
          EXPECT_EQ(m.cache->direct_io(), std::string(io) == "direct" && !fell_back);

          const RunRecord got = run_every_row(m, prompt);
          ASSERT_EQ(got.forwards,
                    static_cast<int>((prompt.size() + m.prefill_chunk - 1) / m.prefill_chunk) + kDecodeSteps);
          expect_same_bits(got, expected, info);

          const auto tel = m.cache->telemetry();
          // Read-ahead: each forward pass guesses MoE layer l as read_ahead_rule.h says.
          for (int l = 0; l < n_moe; ++l)
            EXPECT_EQ(tel.layers[static_cast<size_t>(l)].prefetch_rounds,
                      static_cast<uint64_t>(got.forwards) *
                          static_cast<uint64_t>(guess_rounds_per_forward(info.moe_layers, l, lookahead)))
                << "MoE layer " << l;
          if (lookahead == 0) {
            EXPECT_EQ(tel.total.prefetch_issued + tel.total.prefetch_dropped + tel.total.prefetch_hits, 0u);
          } else if (slots > static_cast<uint64_t>(top_k)) {
            EXPECT_GT(tel.total.prefetch_issued, 0u) << "read-ahead on, with room, issued no read";
          }
          // Reads: every needed record at least once; a budget below the working set must re-read.
          EXPECT_GE(tel.total.reads, needed.size());
          EXPECT_EQ(tel.total.read_failures, 0u);
          if (needed.size() > slots) {
            EXPECT_GT(tel.total.reads, needed.size()) << "a budget below the working set never evicted";
          }
          if (lookahead == 0 && slots == all_records) {
            EXPECT_EQ(tel.total.reads, needed.size()) << "everything fits: each record is read exactly once";
          }
          EXPECT_EQ(tel.tokens, prompt.size() + kDecodeSteps);
        }
}

INSTANTIATE_TEST_SUITE_P(Golden, StreamingGolden,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-medium", "lfm2moe-tiny-f16",
                                           "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny",
                                           "qwen35moe-tiny"));

namespace {

// A copy of the lfm2moe-tiny store with one byte of the record (moe_layer, expert) flipped.
struct DamagedStore {
  std::string dir;
  uint64_t begin = 0, end = 0;  // the record's bytes in experts.bin
};

DamagedStore damaged_copy(const std::string& name, int moe_layer, int expert) {
  const std::string src = ingest_once("lfm2moe-tiny");
  DamagedStore d;
  d.dir = std::string(DF_TEST_TMP) + "/streaming-stores/" + name;
  fs::remove_all(d.dir);
  fs::copy(src, d.dir, fs::copy_options::recursive);
  df::OpenedModel probe = df::open_model(options_for(d.dir));
  const auto& layout = probe.store->layout();
  d.begin = (static_cast<uint64_t>(moe_layer) * static_cast<uint64_t>(layout.n_expert) +
             static_cast<uint64_t>(expert)) *
            layout.record_bytes;
  d.end = d.begin + layout.record_bytes;
  std::fstream f(d.dir + "/experts.bin", std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(d.begin + 100));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(static_cast<std::streamoff>(d.begin + 100));
  f.write(&c, 1);
  return d;
}

// The (MoE layer, expert) the teacher-forced prompt's first token is routed to first in the first MoE layer.
std::pair<int, int> first_routed_expert() {
  const auto j = golden_json("lfm2moe-tiny");
  return {0, j["teacher_forced"]["expert_choices"][0][0][0].get<int>()};
}

std::vector<float> resident_last_logits(const std::vector<int32_t>& prompt) {
  auto o = options_for(golden_path("lfm2moe-tiny.gguf"));
  o.resident = true;
  df::OpenedModel m = df::open_model(o);
  df::Session s(*m.model, 128, 16);
  auto l = s.prefill(prompt);
  return {l.begin(), l.end()};
}

}  // namespace

TEST(StreamingFaults, AFlippedByteIsAnErrorNamingLayerExpertAndBytesAndARetryFailsTheSameWay) {
  const auto [layer, expert] = first_routed_expert();
  const DamagedStore d = damaged_copy("flipped", layer, expert);
  const std::vector<int32_t> prompt = teacher_forced_prompt("lfm2moe-tiny");
  for (int lookahead : {0, 2}) {
    SCOPED_TRACE(testing::Message() << "lookahead " << lookahead);
    auto o = options_for(d.dir);
    o.lookahead = lookahead;
    df::OpenedModel m = df::open_model(o);
    df::Session s(*m.model, 128, 16);
    s.on_failure = [&m] { m.on_failure(); };
    const std::vector<std::string> expect = {
        d.dir + "/experts.bin: MoE layer " + std::to_string(layer) + " expert " + std::to_string(expert) +
            " (bytes " + std::to_string(d.begin) + ".." + std::to_string(d.end) + "): checksum mismatch",
        "re-run diskformer ingest"};
    std::string first, second;
    first = expect_error([&] { s.prefill(prompt); }, expect);
    EXPECT_TRUE(s.tokens().empty());  // the failed step left nothing that looks evaluated
    second = expect_error([&] { s.prefill(prompt); }, expect);
    EXPECT_EQ(first, second) << "a retry must fail the same way, never serve the damaged record";
    EXPECT_TRUE(s.tokens().empty());
  }
}

// An I/O error on one read fails that step with a message naming the record and the errno; the session is
// reset, and a retry (the fault does not repeat) reads the record again and computes the resident bits.
TEST(StreamingFaults, AnIoErrorFailsTheStepAndTheRetryGivesTheResidentBits) {
  const std::string store = ingest_once("lfm2moe-tiny");
  const std::vector<int32_t> prompt = teacher_forced_prompt("lfm2moe-tiny");
  const std::vector<float> want = resident_last_logits(prompt);
  for (const char* io : {"direct", "buffered"}) {
    SCOPED_TRACE(io);
    auto o = options_for(store);
    o.io = io;
    o.lookahead = 0;
    o.faults.eio_on_read = 2;  // the third record read
    df::OpenedModel m = df::open_model(o);
    df::Session s(*m.model, 128, 16);
    s.on_failure = [&m] { m.on_failure(); };
    expect_error([&] { s.prefill(prompt); }, {store + "/experts.bin: MoE layer ", " expert ", "(bytes ",
                                              "read failed: Input/output error"});
    EXPECT_TRUE(s.tokens().empty());
    EXPECT_EQ(m.cache->telemetry().total.read_failures, 1u);
    const auto got = s.prefill(prompt);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
    EXPECT_EQ(s.tokens().size(), prompt.size());
  }
}

// A read that comes back short is resubmitted for the rest: no error, the same bits.
TEST(StreamingFaults, AShortReadIsCompletedAndChangesNothing) {
  const std::string store = ingest_once("lfm2moe-tiny");
  const std::vector<int32_t> prompt = teacher_forced_prompt("lfm2moe-tiny");
  const std::vector<float> want = resident_last_logits(prompt);
  for (const char* io : {"direct", "buffered"}) {
    SCOPED_TRACE(io);
    auto o = options_for(store);
    o.io = io;
    o.faults.short_on_read = 1;
    df::OpenedModel m = df::open_model(o);
    df::Session s(*m.model, 128, 16);
    const auto got = s.prefill(prompt);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
    EXPECT_EQ(m.cache->telemetry().total.read_failures, 0u);
  }
}

TEST(StreamingFaults, AStoreOfAnotherModelOrATruncatedStoreIsRefused) {
  const std::string src = ingest_once("lfm2moe-tiny");
  const std::string dir = std::string(DF_TEST_TMP) + "/streaming-stores/truncated";
  fs::remove_all(dir);
  fs::copy(src, dir, fs::copy_options::recursive);
  const uint64_t full = fs::file_size(dir + "/experts.bin");
  fs::resize_file(dir + "/experts.bin", full - 4096);
  expect_error([&] { df::open_model(options_for(dir)); },
               {"store " + dir + ": experts.bin is " + std::to_string(full - 4096) +
                    " bytes, manifest.json says " + std::to_string(full),
                "the store is damaged; rebuild it with `diskformer ingest lfm2moe-tiny.gguf -o " + dir});
  // --store pointing at another model's store: the source check refuses it.
  const std::string other = ingest_once("lfm2moe-tiny-f16");
  auto o = options_for(golden_path("lfm2moe-tiny.gguf"));
  o.store_dir = other;
  expect_error([&] { df::open_model(o); }, {other, "lfm2moe-tiny.gguf"});
}

TEST(StreamingBudget, ABudgetBelowOneLayersTopKIsRefused) {
  const std::string store = ingest_once("lfm2moe-tiny");
  auto o = options_for(store);
  o.expert_cache_bytes = 4096;
  expect_error([&] { df::open_model(o); }, {"--expert-cache 4.00 KiB", "the minimum is"});
}

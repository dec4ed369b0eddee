#pragma once
// The expert cache's tier chain never changes the output: a model whose experts come from a device tier
// (record slots in the backend's memory) fed from a RAM tier fed from the store gives, for every row of
// every position, the resident model's logits, per-layer residuals and routing bit for bit (memcmp), for
// device tiers from one layer's top-k up to every record, RAM tiers from the minimum (the top-k: in effect
// none) to every record, every eviction policy and read-ahead 0/1/2. Each configuration is shown to have
// taken effect (slots of each tier, copies and reads). Faults below the chain (EIO, short reads) are errors
// naming the record or change nothing, and a retry after a failed step gives the resident bits.
//
// Included by test_engine_tiers.cpp (DF_TIER_DEVICE "cpu": the device tier is host memory, the stand-in
// that runs in CI) and test_engine_cuda_tiers.cpp ("cuda", label gpu: VRAM slots on an H200).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "engine/session.h"
#include "error_matchers.h"
#include "stream/eviction_policy.h"
#include "streaming_rows.h"
#include "util/error.h"

#if !defined(DF_TIER_DEVICE) || !defined(DF_TIER_PREFIX)
#error "define DF_TIER_DEVICE and DF_TIER_PREFIX before including engine_tiers_rules.h"
#endif
// Suite names carry the device (CpuTieredGolden, CudaTieredGolden) so that both binaries' tests stay apart
// in CTest.
#define DF_TIER_CAT2(a, b) a##b
#define DF_TIER_CAT(a, b) DF_TIER_CAT2(a, b)
#define DF_TIER_SUITE(x) DF_TIER_CAT(DF_TIER_PREFIX, x)
// gtest pastes its arguments: one more expansion first.
#define DF_TIER_INSTANTIATE(prefix, suite, values) INSTANTIATE_TEST_SUITE_P(prefix, suite, values)

namespace df::testing::tiers {
namespace {

using namespace df::testing::rows;

df::ModelSourceOptions on_device(df::ModelSourceOptions o) {
  o.device = DF_TIER_DEVICE;
  return o;
}

// The resident run on the device, or a skip naming why there is no such device here.
bool open_resident(const std::string& model, df::OpenedModel& out) {
  auto o = on_device(options_for(golden_path(model + ".gguf")));
  o.resident = true;
  try {
    out = df::open_model(o);
  } catch (const df::Error& e) {
    if (std::string(DF_TIER_DEVICE) == "cpu") throw;
    std::cout << "[  SKIPPED ] no " << DF_TIER_DEVICE << " backend here: " << e.what() << "\n";
    return false;
  }
  return true;
}

// The store's layout (record size, each MoE layer's parts), read from the store itself.
df::store::Layout store_layout(const std::string& store) {
  return df::open_model(options_for(store)).store->layout();
}

// Whether the backend computes a layer's experts from host memory (--cpu-misses) for a SwiGLU op of top_k
// without biases, given the parts' types and packings in the store.
bool computes_swiglu_host_experts(const df::backend::Backend& be, const df::store::MoeLayerLayout& parts,
                                  int top_k) {
  const auto shape = [](const df::store::ExpertPart& p) {
    return df::backend::Weight{p.type, nullptr, p.n_in, p.n_out, p.packing};
  };
  return be.computes_host_experts(df::backend::ActivationParams{}, shape(parts.gate), shape(parts.up),
                                  shape(parts.down), top_k, false);
}

// The resident model's every row with a prefill chunk of each size asked for, run once per size: a small
// tier shrinks the chunk (its union must fit), and while the CPU's results do not depend on the chunk, a
// GPU's trunk products may (tensor cores for long chunks), so a tiered run's reference has its chunk.
class ResidentRuns {
 public:
  ResidentRuns(std::string model, std::vector<int32_t> prompt)
      : model_(std::move(model)), prompt_(std::move(prompt)) {}
  void add(int chunk, const RunRecord& r) { runs_.emplace(chunk, r); }
  const RunRecord& operator()(int chunk) {
    auto it = runs_.find(chunk);
    if (it != runs_.end()) return it->second;
    auto o = on_device(options_for(golden_path(model_ + ".gguf")));
    o.resident = true;
    o.prefill_chunk = chunk;
    df::OpenedModel r = df::open_model(o);
    return runs_.emplace(chunk, run_every_row(r, prompt_)).first->second;
  }

 private:
  std::string model_;
  std::vector<int32_t> prompt_;
  std::map<int, RunRecord> runs_;
};

class DF_TIER_SUITE(TieredGolden) : public ::testing::TestWithParam<const char*> {};

TEST_P(DF_TIER_SUITE(TieredGolden),
       EveryRowBitIdenticalToResidentForEveryDeviceTierRamTierPolicyAndLookahead) {
  const std::string model = GetParam();
  const std::vector<int32_t> prompt = teacher_forced_prompt(model);
  df::OpenedModel resident;
  if (!open_resident(model, resident)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  const RunRecord expected = run_every_row(resident, prompt);
  const auto info = resident.model->info();
  const int n_moe = static_cast<int>(info.moe_layers.size()), top_k = info.n_expert_used;
  const uint64_t all_records = static_cast<uint64_t>(info.n_expert) * static_cast<uint64_t>(n_moe);
  std::set<int64_t> needed;
  {
    const size_t per_layer = expected.expert_ids.size() / static_cast<size_t>(n_moe);
    for (size_t i = 0; i < expected.expert_ids.size(); ++i)
      needed.insert(static_cast<int64_t>(i / per_layer) * info.n_expert + expected.expert_ids[i]);
  }
  const std::string store = ingest_once(model);
  const uint64_t record_bytes = store_layout(store).record_bytes;
  ResidentRuns resident_with_chunk(model, prompt);
  resident_with_chunk.add(resident.prefill_chunk, expected);
  const auto policies = df::stream::policy_names();
  size_t run = 0;
  const std::vector<uint64_t> device_budgets = {static_cast<uint64_t>(top_k),
                                                static_cast<uint64_t>(2 * top_k + 1),
                                                static_cast<uint64_t>(info.n_expert), all_records};
  const std::vector<uint64_t> ram_budgets = {static_cast<uint64_t>(top_k),
                                             static_cast<uint64_t>(info.n_expert), all_records};
  for (uint64_t device_slots : device_budgets)
    for (uint64_t ram_slots : ram_budgets)
      for (int lookahead : {0, 1, 2}) {
        // Every policy in turn, for both tiers (the combinations of budgets and read-ahead matter more).
        const char* policy = policies[run++ % policies.size()];
        SCOPED_TRACE(::testing::Message() << model << " device slots " << device_slots << " ram slots "
                                          << ram_slots << " " << policy << " lookahead " << lookahead);
        auto o = on_device(options_for(store));
        o.gpu_cache_bytes = device_slots * record_bytes;
        o.expert_cache_bytes = ram_slots * record_bytes;
        o.cache_policy = policy;
        o.lookahead = lookahead;
        df::OpenedModel m = df::open_model(o);
        ASSERT_NE(m.tiers, nullptr);
        ASSERT_NE(m.cache, nullptr);
        EXPECT_EQ(m.tiers->slots(), device_slots);
        EXPECT_EQ(m.cache->slots(), ram_slots);
        EXPECT_STREQ(m.tiers->policy_name(), m.cache->policy_name());

        const RunRecord got = run_every_row(m, prompt);
        expect_same_bits(got, resident_with_chunk(m.prefill_chunk), info);

        const auto dev = m.tiers->telemetry();
        const auto ram = m.cache->telemetry();
        // Every needed record went up at least once, and came from disk at least once; nothing failed.
        EXPECT_GE(dev.total.reads, needed.size());
        EXPECT_GE(ram.total.reads, needed.size());
        EXPECT_EQ(dev.total.read_failures + ram.total.read_failures, 0u);
        EXPECT_EQ(dev.total.bytes_read, dev.total.reads * record_bytes);
        // A device tier below the working set re-copies; one that holds everything copies each record once
        // without guesses, and a RAM tier that holds everything reads each record from disk once.
        if (needed.size() > device_slots) {
          EXPECT_GT(dev.total.reads, needed.size()) << "a device tier below the working set never evicted";
        }
        if (lookahead == 0 && device_slots == all_records) {
          EXPECT_EQ(dev.total.reads, needed.size());
        }
        if (lookahead == 0 && ram_slots == all_records) {
          EXPECT_EQ(ram.total.reads, needed.size());
        }
        // A record evicted from the device tier is found again in RAM when it fits there: with every
        // record in RAM, the disk is read once per record however often the device tier re-copies.
        if (lookahead == 0 && ram_slots == all_records && needed.size() > device_slots) {
          EXPECT_LT(ram.total.reads, dev.total.reads);
        }
        // Hits and misses of the device tier add up to its demand accesses.
        EXPECT_EQ(dev.total.hits + dev.total.misses, dev.total.accesses);
        EXPECT_GT(dev.total.accesses, 0u);
        EXPECT_EQ(dev.tokens, prompt.size() + kDecodeSteps);
      }
}

DF_TIER_INSTANTIATE(Golden, DF_TIER_SUITE(TieredGolden),
                    ::testing::Values("lfm2moe-tiny", "lfm2moe-medium", "lfm2moe-tiny-f16", "qwen3moe-tiny",
                                      "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"));

// The resident model's last logits after the prompt in chunks of `chunk` (what a tiered model of that chunk
// must give).
std::vector<float> resident_last_logits(const std::vector<int32_t>& prompt, int chunk) {
  auto o = on_device(options_for(golden_path("lfm2moe-tiny.gguf")));
  o.resident = true;
  df::OpenedModel m = df::open_model(o);
  df::Session s(*m.model, 128, chunk);
  const auto logits = s.prefill(prompt);
  return std::vector<float>(logits.begin(), logits.end());
}

df::ModelSourceOptions tiered_options(const std::string& store, uint64_t record_bytes, int top_k) {
  auto o = on_device(options_for(store));
  o.gpu_cache_bytes = static_cast<uint64_t>(top_k + 1) * record_bytes;
  o.expert_cache_bytes = static_cast<uint64_t>(2 * top_k) * record_bytes;
  return o;
}

// An I/O error under the RAM tier fails the step with a message naming the record; after the session's
// clean-up (both tiers unpinned), the retry reads the record again and computes the resident bits. Without
// read-ahead, so that the failing read is a demand read (a failed guess is no error: the record is read
// again when demanded, and which read is the third one then depends on the reader's timing).
TEST(DF_TIER_SUITE(TieredFaults), AnIoErrorFailsTheStepNamingTheRecordAndTheRetryGivesTheResidentBits) {
  df::OpenedModel probe_resident;
  if (!open_resident("lfm2moe-tiny", probe_resident)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  const std::string store = ingest_once("lfm2moe-tiny");
  const std::vector<int32_t> prompt = teacher_forced_prompt("lfm2moe-tiny");
  const int top_k = probe_resident.model->info().n_expert_used;
  const uint64_t record_bytes = store_layout(store).record_bytes;
  for (int lookahead : {0}) {
    SCOPED_TRACE(::testing::Message() << "lookahead " << lookahead);
    auto o = tiered_options(store, record_bytes, top_k);
    o.lookahead = lookahead;
    o.faults.eio_on_read = 2;
    df::OpenedModel m = df::open_model(o);
    ASSERT_NE(m.tiers, nullptr);
    const std::vector<float> want = resident_last_logits(prompt, m.prefill_chunk);
    df::Session s(*m.model, 128, m.prefill_chunk);
    s.on_failure = [&m] { m.on_failure(); };
    expect_error([&] { s.prefill(prompt); }, {store + "/experts.bin: MoE layer ", " expert ", "(bytes ",
                                              "read failed: Input/output error"});
    EXPECT_TRUE(s.tokens().empty());
    EXPECT_EQ(m.cache->telemetry().total.read_failures, 1u);
    const auto got = s.prefill(prompt);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  }
}

// A short read under the chain is completed: no error, the same bits.
TEST(DF_TIER_SUITE(TieredFaults), AShortReadIsCompletedAndChangesNothing) {
  df::OpenedModel probe_resident;
  if (!open_resident("lfm2moe-tiny", probe_resident)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  const std::string store = ingest_once("lfm2moe-tiny");
  const std::vector<int32_t> prompt = teacher_forced_prompt("lfm2moe-tiny");
  const uint64_t record_bytes = store_layout(store).record_bytes;
  auto o = tiered_options(store, record_bytes, probe_resident.model->info().n_expert_used);
  o.faults.short_on_read = 1;
  df::OpenedModel m = df::open_model(o);
  const std::vector<float> want = resident_last_logits(prompt, m.prefill_chunk);
  df::Session s(*m.model, 128, m.prefill_chunk);
  const auto got = s.prefill(prompt);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

// Experts first, first + 1, ..., n of them.
std::vector<int32_t> expert_ids(int first, int n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = first + i;
  return ids;
}

// One decode step's experts of a layer through the tiers: pinned (copied up where missing), then released.
void route_through(df::stream::TieredExpertProvider& tiers, int layer, const std::vector<int32_t>& ids) {
  ASSERT_TRUE(tiers.routed_slots(layer, ids).has_value());
  tiers.release_routed(layer, ids);
}

// Guesses already in RAM have their copies up deferred until the next layer's own copies are issued
// (those are what compute waits for first). A layer whose pins need every device slot, each held by such a
// guess, gets them, and the chain is left sound: a prompt afterwards gives the resident bits.
TEST(DF_TIER_SUITE(TieredGuesses), ALayersPinsTakeTheSlotsOfGuessesWhoseCopiesWereDeferred) {
  df::OpenedModel probe_resident;
  if (!open_resident("lfm2moe-tiny", probe_resident)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  const std::string store = ingest_once("lfm2moe-tiny");
  const std::vector<int32_t> prompt = teacher_forced_prompt("lfm2moe-tiny");
  const auto info = probe_resident.model->info();
  const int top_k = info.n_expert_used;
  ASSERT_GE(info.n_expert, 2 * top_k);
  ASSERT_GE(info.moe_layers.size(), 2u);
  const uint64_t record_bytes = store_layout(store).record_bytes;
  auto o = on_device(options_for(store));
  o.gpu_cache_bytes = static_cast<uint64_t>(top_k) * record_bytes;
  o.expert_cache_bytes = static_cast<uint64_t>(info.n_expert) * info.moe_layers.size() * record_bytes;
  o.lookahead = 1;
  df::OpenedModel m = df::open_model(o);
  ASSERT_NE(m.tiers, nullptr);
  df::stream::TieredExpertProvider& tiers = *m.tiers;
  const std::vector<int32_t> first = expert_ids(0, top_k), second = expert_ids(top_k, top_k);
  const auto through = [&](int layer, const std::vector<int32_t>& ids) { route_through(tiers, layer, ids); };
  through(1, first);
  through(1, second);  // the first set is now in RAM only
  for (int32_t e : first) EXPECT_FALSE(tiers.resident(1, e));
  tiers.prefetch(1, first);  // every device slot now holds one of these guesses, not yet copied up
  through(0, first);
  for (int32_t e : first) EXPECT_TRUE(tiers.resident(0, e));
  const std::vector<float> want = resident_last_logits(prompt, m.prefill_chunk);
  df::Session session(*m.model, 128, m.prefill_chunk);
  const auto got = session.prefill(prompt);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

// A guess the device tier already holds needs nothing from below: it is not read into RAM again (the RAM
// tier had given it up), which would spend the disk and a RAM slot on a record already above it.
TEST(DF_TIER_SUITE(TieredGuesses), GuessesTheDeviceTierHoldsAreNotReadIntoRam) {
  df::OpenedModel probe_resident;
  if (!open_resident("lfm2moe-tiny", probe_resident)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  const std::string store = ingest_once("lfm2moe-tiny");
  const auto info = probe_resident.model->info();
  const int top_k = info.n_expert_used;
  ASSERT_GE(info.n_expert, 2 * top_k);
  const uint64_t record_bytes = store_layout(store).record_bytes;
  auto o = on_device(options_for(store));
  o.gpu_cache_bytes = static_cast<uint64_t>(2 * top_k) * record_bytes;
  o.expert_cache_bytes = static_cast<uint64_t>(top_k) * record_bytes;
  o.lookahead = 1;
  df::OpenedModel m = df::open_model(o);
  ASSERT_NE(m.tiers, nullptr);
  df::stream::TieredExpertProvider& tiers = *m.tiers;
  const std::vector<int32_t> first = expert_ids(0, top_k), second = expert_ids(top_k, top_k);
  const auto through = [&](int layer, const std::vector<int32_t>& ids) { route_through(tiers, layer, ids); };
  through(1, first);
  through(1, second);
  tiers.release_spare();  // the copies give their RAM pins back
  m.cache->drain();
  for (int32_t e : first) {
    ASSERT_TRUE(tiers.resident(1, e)) << "the device tier holds both sets";
    ASSERT_FALSE(m.cache->resident(1, e)) << "the RAM tier holds only the second set";
  }
  const uint64_t reads = m.cache->telemetry().total.reads;
  tiers.prefetch(1, first);
  m.cache->drain();
  EXPECT_EQ(m.cache->telemetry().total.reads, reads);
  for (int32_t e : first) EXPECT_FALSE(m.cache->resident(1, e));
  // A guess the device tier does not hold is still read.
  std::vector<int32_t> third{static_cast<int32_t>(2 * top_k < info.n_expert ? 2 * top_k : 0)};
  if (!tiers.resident(1, third[0])) {
    tiers.prefetch(1, third);
    m.cache->drain();
    EXPECT_EQ(m.cache->telemetry().total.reads, reads + 1);
  }
}

// --cpu-misses at the provider: a layer's experts that are neither in the device tier nor on their way stay
// in their RAM records (RoutedExperts::host, slot -1 in the map), but miss_copies of them a call, which are
// copied up; every RAM pin comes back at release_routed (a RAM tier of top_k + 1 records would run out after
// a few layers otherwise); the telemetry counts them; a model run after it gives the resident bits.
TEST(DF_TIER_SUITE(TieredCpuMisses), MissesStayInRamButMissCopiesAndTheirPinsComeBack) {
  df::OpenedModel probe_resident;
  if (!open_resident("lfm2moe-tiny", probe_resident)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  const std::string store = ingest_once("lfm2moe-tiny");
  const std::vector<int32_t> prompt = teacher_forced_prompt("lfm2moe-tiny");
  const auto info = probe_resident.model->info();
  const int top_k = info.n_expert_used, n_moe = static_cast<int>(info.moe_layers.size());
  ASSERT_GE(info.n_expert, 2 * top_k);
  const uint64_t record_bytes = store_layout(store).record_bytes;
  auto o = on_device(options_for(store));
  o.gpu_cache_bytes = static_cast<uint64_t>(top_k + 1) * record_bytes;
  o.expert_cache_bytes = static_cast<uint64_t>(top_k + 1) * record_bytes;
  o.lookahead = 0;
  o.cpu_misses = true;
  o.miss_copies = 1;
  df::OpenedModel m = df::open_model(o);
  ASSERT_NE(m.tiers, nullptr);
  df::stream::TieredExpertProvider& tiers = *m.tiers;
  const df::experts::RoutedOp op{df::backend::ActivationParams{}, top_k, false};
  const auto& parts = m.store->layout().layers[0];
  if (!computes_swiglu_host_experts(*m.backend, parts, top_k))
    GTEST_SKIP() << "the " << DF_TIER_DEVICE << " backend computes no such expert on the host";
  uint64_t host_total = 0;
  for (int round = 0; round < 2; ++round)
    for (int layer = 0; layer < n_moe; ++layer) {
      std::vector<int32_t> ids(static_cast<size_t>(top_k));
      for (int i = 0; i < top_k; ++i) ids[static_cast<size_t>(i)] = (layer * top_k + i) % info.n_expert;
      SCOPED_TRACE(::testing::Message() << "round " << round << " layer " << layer);
      std::vector<bool> held(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) held[i] = tiers.resident(layer, ids[i]);
      auto ex = tiers.routed_slots(layer, ids, op);
      ASSERT_TRUE(ex.has_value());
      // The held experts and one more go to the device; the others stay on the host.
      size_t want_host = 0;
      int copies = 1;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (held[i]) continue;
        if (copies > 0)
          --copies;
        else
          ++want_host;
      }
      EXPECT_EQ(ex->host.size(), want_host);
      std::vector<int32_t> slot_map(static_cast<size_t>(info.n_expert));
      m.backend->download(slot_map.data(), ex->slot_of, slot_map.size());
      for (int32_t e : ids) {
        const auto h = std::find_if(ex->host.begin(), ex->host.end(),
                                    [e](const df::backend::HostExpert& x) { return x.expert == e; });
        if (h == ex->host.end()) {
          EXPECT_GE(slot_map[static_cast<size_t>(e)], 0) << "expert " << e;
          continue;
        }
        EXPECT_EQ(slot_map[static_cast<size_t>(e)], -1) << "expert " << e;
        EXPECT_EQ(h->gate.type, parts.gate.type);
        EXPECT_EQ(h->down.n_out, parts.down.n_out);
        EXPECT_NE(h->gate.data, nullptr);
      }
      host_total += ex->host.size();
      tiers.release_routed(layer, ids);
    }
  EXPECT_GT(host_total, 0u);
  EXPECT_EQ(tiers.telemetry().total.host_computed, host_total);
  const std::vector<float> want = resident_last_logits(prompt, m.prefill_chunk);
  df::Session session(*m.model, 128, m.prefill_chunk);
  const auto got = session.prefill(prompt);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
}

// --cpu-misses end to end: every row's logits, residuals and routing are the resident model's bits, for
// device tiers from one layer's top-k up, read-ahead 0/1/2 and 0 or 1 copies a layer. Only a backend that
// takes the routed op for decode (max_routed_tokens) leaves experts on the host; the CPU backend does not.
class DF_TIER_SUITE(TieredCpuMissesGolden) : public ::testing::TestWithParam<const char*> {};

TEST_P(DF_TIER_SUITE(TieredCpuMissesGolden), EveryRowBitIdenticalToResident) {
  const std::string model = GetParam();
  df::OpenedModel resident;
  if (!open_resident(model, resident)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  if (resident.backend->max_routed_tokens() == 0)
    GTEST_SKIP() << "the " << DF_TIER_DEVICE
                 << " backend takes no routed op: its tiers never leave experts on "
                 << "the host (the provider's side runs in TieredCpuMisses)";
  const std::vector<int32_t> prompt = teacher_forced_prompt(model);
  const RunRecord expected = run_every_row(resident, prompt);
  const auto info = resident.model->info();
  const int n_moe = static_cast<int>(info.moe_layers.size()), top_k = info.n_expert_used;
  const uint64_t all_records = static_cast<uint64_t>(info.n_expert) * static_cast<uint64_t>(n_moe);
  const std::string store = ingest_once(model);
  const df::store::Layout layout = store_layout(store);
  const uint64_t record_bytes = layout.record_bytes;
  ResidentRuns resident_with_chunk(model, prompt);
  resident_with_chunk.add(resident.prefill_chunk, expected);
  uint64_t host_total = 0;
  for (uint64_t device_slots : {static_cast<uint64_t>(top_k), static_cast<uint64_t>(2 * top_k + 1)})
    for (int lookahead : {0, 1, 2})
      for (int copies : {0, 1}) {
        SCOPED_TRACE(::testing::Message() << model << " device slots " << device_slots << " lookahead "
                                          << lookahead << " miss copies " << copies);
        auto o = on_device(options_for(store));
        o.gpu_cache_bytes = device_slots * record_bytes;
        o.expert_cache_bytes = all_records * record_bytes;
        o.lookahead = lookahead;
        o.cpu_misses = true;
        o.miss_copies = copies;
        df::OpenedModel m = df::open_model(o);
        ASSERT_NE(m.tiers, nullptr);
        expect_same_bits(run_every_row(m, prompt), resident_with_chunk(m.prefill_chunk), info);
        host_total += m.tiers->telemetry().total.host_computed;
      }
  std::cout << "[   INFO   ] " << model << ": " << host_total << " experts computed on the host\n";
  // gpt-oss's experts have biases and another activation: no host experts for it.
  if (model != "gpt-oss-tiny" && model != "gemma4-tiny" &&
      computes_swiglu_host_experts(*resident.backend, layout.layers[0], top_k)) {
    EXPECT_GT(host_total, 0u) << "no expert was left on the host";
  }
}

DF_TIER_INSTANTIATE(Golden, DF_TIER_SUITE(TieredCpuMissesGolden),
                    ::testing::Values("lfm2moe-tiny", "lfm2moe-medium", "lfm2moe-tiny-f16", "qwen3moe-tiny",
                                      "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"));

// Greedy decoding queued ahead of the host (Session::greedy_start: on by default on CUDA, forced on here)
// through the tiers: each step's routing still comes back to drive the copies while the next step is queued
// behind it. The ids, the session's tokens and the next decode's logits are the resident decode loop's, bit
// for bit, with a device tier below one token's experts, read-ahead on, and the host computing the misses
// where the backend can (--cpu-misses).
class DF_TIER_SUITE(TieredGreedyAhead) : public ::testing::TestWithParam<const char*> {};

TEST_P(DF_TIER_SUITE(TieredGreedyAhead), GivesTheResidentDecodeLoopsTokensAndBits) {
  const std::string model = GetParam();
  df::OpenedModel probe;
  if (!open_resident(model, probe)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  const std::string store = ingest_once(model);
  const std::vector<int32_t> prompt = teacher_forced_prompt(model);
  const int top_k = probe.model->info().n_expert_used, steps = 8;
  const int n_ctx = static_cast<int>(prompt.size()) + steps + 2;
  const uint64_t record_bytes = store_layout(store).record_bytes;
  const bool host_experts = probe.backend->max_routed_tokens() > 0;
  for (bool cpu_misses : {false, true}) {
    if (cpu_misses && !host_experts) continue;
    SCOPED_TRACE(::testing::Message() << model << (cpu_misses ? " --cpu-misses" : ""));
    auto o = tiered_options(store, record_bytes, top_k);
    o.lookahead = 1;
    o.cpu_misses = cpu_misses;
    df::OpenedModel m = df::open_model(o);
    ASSERT_NE(m.tiers, nullptr);
    auto r = on_device(options_for(golden_path(model + ".gguf")));
    r.resident = true;
    r.prefill_chunk = m.prefill_chunk;  // a GPU's trunk products may depend on the chunk
    df::OpenedModel resident = df::open_model(r);

    df::Session loop(*resident.model, n_ctx, m.prefill_chunk);
    loop.set_greedy_ahead(false);
    int32_t t = df::Sampler::argmax(loop.prefill(prompt));
    const int32_t first = t;
    std::vector<int32_t> want;
    for (int i = 0; i < steps; ++i) {
      t = df::Sampler::argmax(loop.decode(t));
      want.push_back(t);
    }

    df::Session ahead(*m.model, n_ctx, m.prefill_chunk);
    ahead.set_greedy_ahead(true);
    ASSERT_TRUE(ahead.greedy_ahead());
    ahead.prefill(prompt);
    const uint64_t copies_before = m.tiers->telemetry().total.reads;
    ahead.greedy_start(first);
    std::vector<int32_t> got;
    for (int i = 0; i < steps; ++i) got.push_back(ahead.greedy_next(i + 1 < steps));
    ahead.greedy_finish();
    EXPECT_EQ(got, want);
    EXPECT_EQ(ahead.tokens(), loop.tokens());
    EXPECT_GT(m.tiers->telemetry().total.reads, copies_before) << "the greedy steps copied no expert up";

    const auto next_loop = loop.decode(want.back());
    const std::vector<float> expected(next_loop.begin(), next_loop.end());
    const auto next_ahead = ahead.decode(want.back());
    ASSERT_EQ(next_ahead.size(), expected.size());
    EXPECT_EQ(std::memcmp(next_ahead.data(), expected.data(), expected.size() * sizeof(float)), 0);
  }
}

DF_TIER_INSTANTIATE(Golden, DF_TIER_SUITE(TieredGreedyAhead),
                    ::testing::Values("lfm2moe-tiny", "lfm2moe-tiny-f16", "qwen3moe-tiny", "gpt-oss-tiny",
                                      "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"));

// A device tier below one layer's top-k is refused, naming the size it needs.
TEST(DF_TIER_SUITE(TieredBudget), ADeviceTierBelowOneLayersTopKIsRefused) {
  df::OpenedModel probe_resident;
  if (!open_resident("lfm2moe-tiny", probe_resident)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  const std::string store = ingest_once("lfm2moe-tiny");
  auto o = on_device(options_for(store));
  o.gpu_cache_bytes = 1;
  expect_error([&] { df::open_model(o); },
               {"the device tier of the expert cache holds 0 records", "--gpu-cache at least"});
}

// A layer split over two devices (the device named twice: one backend each, standing in for two cards),
// each with its own device tier above one shared RAM tier, gives the one-device resident model's bits for
// tiers from one layer's top-k up to every record on each card (the same size on both, or one each), RAM
// tiers from the minimum to every record, read-ahead 0 and 2 and an uneven split; each card's tier serves
// its own layers only; the split with every expert resident, and with experts read from RAM directly where
// the device reads host memory, gives the same bits.
class DF_TIER_SUITE(SplitTieredGolden) : public ::testing::TestWithParam<const char*> {};

TEST_P(DF_TIER_SUITE(SplitTieredGolden), TwoDevicesGiveTheOneDeviceBitsAndEachTierServesItsOwnLayers) {
  const std::string model = GetParam();
  const std::vector<int32_t> prompt = teacher_forced_prompt(model);
  df::OpenedModel resident;
  if (!open_resident(model, resident)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  const std::string two = std::string(DF_TIER_DEVICE) + "," + DF_TIER_DEVICE;
  const auto info = resident.model->info();
  const int n_moe = static_cast<int>(info.moe_layers.size()), top_k = info.n_expert_used;
  const uint64_t all_records = static_cast<uint64_t>(info.n_expert) * static_cast<uint64_t>(n_moe);
  ResidentRuns resident_with_chunk(model, prompt);
  {
    auto o = options_for(golden_path(model + ".gguf"));
    o.device = two;
    o.resident = true;
    df::OpenedModel split = df::open_model(o);
    ASSERT_EQ(split.backends.size(), 2u);
    expect_same_bits(run_every_row(split, prompt), resident_with_chunk(split.prefill_chunk), info);
  }
  const std::string store = ingest_once(model);
  const uint64_t record_bytes = store_layout(store).record_bytes;
  if (std::string(DF_TIER_DEVICE) == "cpu") {  // a host-memory device without --gpu-cache reads RAM directly
    auto o = options_for(store);
    o.device = two;
    o.expert_cache_bytes = static_cast<uint64_t>(top_k) * record_bytes;
    df::OpenedModel split = df::open_model(o);
    EXPECT_EQ(split.ram_readers.size(), 2u);
    EXPECT_EQ(std::count(split.device_tiers.begin(), split.device_tiers.end(), nullptr), 2);
    expect_same_bits(run_every_row(split, prompt), resident_with_chunk(split.prefill_chunk), info);
  }
  struct Budgets {
    std::vector<uint64_t> device_slots;  // one: the size of each
    uint64_t ram_slots;
    std::vector<double> shares;
  };
  const uint64_t k = static_cast<uint64_t>(top_k);
  const std::vector<Budgets> budgets = {{{k}, k, {}},
                                        {{2 * k + 1}, all_records, {}},
                                        {{all_records}, k, {1, 3}},
                                        {{k, all_records}, all_records, {}},
                                        {{all_records, 2 * k + 1}, k, {3, 1}}};
  for (const Budgets& b : budgets)
    for (int lookahead : {0, 2}) {
      SCOPED_TRACE(::testing::Message()
                   << model << " device slots " << ::testing::PrintToString(b.device_slots) << " ram slots "
                   << b.ram_slots << " shares " << ::testing::PrintToString(b.shares) << " lookahead "
                   << lookahead);
      auto o = options_for(store);
      o.device = two;
      if (b.device_slots.size() == 1)
        o.gpu_cache_bytes = b.device_slots[0] * record_bytes;
      else
        for (uint64_t slots : b.device_slots) o.gpu_cache_per_device.push_back(slots * record_bytes);
      o.expert_cache_bytes = b.ram_slots * record_bytes;
      o.tensor_split = b.shares;
      o.lookahead = lookahead;
      df::OpenedModel m = df::open_model(o);
      ASSERT_EQ(m.device_tiers.size(), 2u);
      ASSERT_EQ(m.layer_ranges.size(), 2u);
      EXPECT_EQ(m.cache->slots(), b.ram_slots);
      const RunRecord got = run_every_row(m, prompt);
      expect_same_bits(got, resident_with_chunk(m.prefill_chunk), info);
      for (size_t d = 0; d < 2; ++d) {
        const auto* tier = m.device_tiers[d];
        ASSERT_NE(tier, nullptr);
        EXPECT_EQ(tier->slots(), std::min(b.device_slots[b.device_slots.size() == 1 ? 0 : d], all_records));
        const auto tel = tier->telemetry();
        const auto [first, end] = m.layer_ranges[d];
        uint64_t own = 0;
        for (size_t l = 0; l < tel.layers.size(); ++l) {
          const int layer = info.moe_layers[l];
          if (layer >= first && layer < end) {
            own += tel.layers[l].accesses;
            continue;
          }
          EXPECT_EQ(tel.layers[l].accesses + tel.layers[l].reads, 0u)
              << "device " << d << " (layers " << first << "-" << end - 1 << ") served model layer " << layer;
        }
        bool has_moe = false;
        for (int layer : info.moe_layers) has_moe = has_moe || (layer >= first && layer < end);
        if (has_moe) {
          EXPECT_GT(own, 0u) << "device " << d << " served none of its layers";
        }
      }
      const auto merged = m.device_telemetry();
      EXPECT_EQ(merged.total.accesses, m.device_tiers[0]->telemetry().total.accesses +
                                           m.device_tiers[1]->telemetry().total.accesses);
    }
  if (std::string(DF_TIER_DEVICE) != "cpu") {
    // A CPU beside the GPU reads the RAM tier directly: --gpu-cache sizes the GPU's tier only. (Its results
    // are the CPU's numerics for its layers, so only the arrangement is checked.)
    auto o = options_for(store);
    o.device = std::string(DF_TIER_DEVICE) + ",cpu";
    o.gpu_cache_bytes = (2 * k + 1) * record_bytes;
    df::OpenedModel m = df::open_model(o);
    ASSERT_EQ(m.device_tiers.size(), 2u);
    EXPECT_NE(m.device_tiers[0], nullptr);
    EXPECT_EQ(m.device_tiers[1], nullptr);
    EXPECT_EQ(m.ram_readers.size(), 1u);
    EXPECT_EQ(run_every_row(m, prompt).logits.size(), resident_with_chunk(m.prefill_chunk).logits.size());
  }
}

DF_TIER_INSTANTIATE(Golden, DF_TIER_SUITE(SplitTieredGolden),
                    ::testing::Values("lfm2moe-tiny", "lfm2moe-tiny-f16", "qwen3moe-tiny", "gpt-oss-tiny",
                                      "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"));

// Budgets and shares that do not match the devices are refused, naming both.
TEST(DF_TIER_SUITE(SplitTieredBudget), SizesAndSharesThatDoNotMatchTheDevicesAreRefused) {
  df::OpenedModel probe_resident;
  if (!open_resident("lfm2moe-tiny", probe_resident)) GTEST_SKIP() << "no " << DF_TIER_DEVICE << " device";
  const std::string store = ingest_once("lfm2moe-tiny");
  const std::string two = std::string(DF_TIER_DEVICE) + "," + DF_TIER_DEVICE;
  auto o = options_for(store);
  o.device = two;
  o.gpu_cache_per_device = {1 << 20, 1 << 20, 1 << 20};
  expect_error([&] { df::open_model(o); }, {"--gpu-cache lists 3 sizes for 2 devices (" + two + ")"});
  o.gpu_cache_per_device.clear();
  o.tensor_split = {1};
  expect_error([&] { df::open_model(o); }, {"--tensor-split gives 1 shares for 2 devices"});
  o.tensor_split = {1, 0};
  expect_error([&] { df::open_model(o); }, {"device 1 gets no layer of"});
  o.tensor_split.clear();
  o.device = std::string(DF_TIER_DEVICE) + ",," + DF_TIER_DEVICE;
  expect_error([&] { df::open_model(o); }, {"an empty device name in the list"});
}

}  // namespace
}  // namespace df::testing::tiers

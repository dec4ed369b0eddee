// Record, then replay: a run on a golden model with --record-routing's recorder writes the llama.cpp CSV of
// its routing (prompt rows at -n..-1, decode rows from 0, the engine's batch order), and `diskformer
// replay`'s engine fed that trace with the run's budget, policy and prefill chunk gives exactly the counts
// the expert cache's own telemetry reports, per MoE layer: accesses, hits, misses and reads. At lookahead 0:
// the engine's guesses come from the next layers' routers on hidden states the trace does not hold, and
// whether a guess is still queued when its layer comes depends on the disk's timing (stream/trace_replay.h).
// Recording changes no output.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/generate.h"
#include "engine/model_source.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "golden_json.h"
#include "store/ingest.h"
#include "stream/routing_trace.h"
#include "stream/trace_replay.h"

using df::testing::golden_json;
using df::testing::golden_path;

namespace {

constexpr int kDecode = 8;

std::string ingest_once(const std::string& model) {
  df::store::IngestOptions o;
  o.output_dir = std::string(DF_TEST_TMP) + "/stores/" + model;
  o.use_index = false;
  o.wait_for_lock = true;
  return df::store::resolve_store(golden_path(model + ".gguf"), o);
}

struct Recorded {
  std::vector<int32_t> tokens;
  df::stream::TelemetrySnapshot telemetry;
  df::stream::TelemetrySnapshot device_telemetry;  // with a device tier
  int prefill_chunk = 0;
};

// device_slots > 0: a device tier of that many slots in host memory (the CPU backend's, as CI tests the tier
// chain) above the RAM tier of `slots`.
Recorded generate_once(const std::string& store, uint64_t slots, const std::string& policy,
                       const std::string& trace, const std::vector<int32_t>& prompt,
                       uint64_t device_slots = 0) {
  df::ModelSourceOptions o;
  o.path = store;
  o.n_threads = 2;
  o.prefill_chunk = 16;
  o.lookahead = 0;
  o.cache_policy = policy;
  o.record_routing = trace;
  o.notice = [](const std::string&) {};
  {
    df::OpenedModel probe = df::open_model(o);
    o.expert_cache_bytes = slots * probe.store->layout().record_bytes;
    if (device_slots > 0) o.gpu_cache_bytes = device_slots * probe.store->layout().record_bytes;
  }
  df::OpenedModel m = df::open_model(o);
  df::Session session(*m.model, 256, m.prefill_chunk);
  session.on_step = [&m](uint64_t t, uint64_t ns) { m.on_step(t, ns); };
  if (m.routing) session.on_prefill = [&m](int n) { m.routing->begin_prompt(n); };
  df::SamplingParams sp;
  sp.temperature = 0;
  df::Sampler sampler(m.model->info().n_vocab, sp);
  df::GenerateOptions go;
  go.n_predict = kDecode;
  Recorded r;
  // Two turns, as a chat: the second prompt extends the first, so the trace holds two sessions.
  r.tokens = df::generate(session, sampler, prompt, go).tokens;
  std::vector<int32_t> second = prompt;
  second.insert(second.end(), r.tokens.begin(), r.tokens.end());
  const auto more = df::generate(session, sampler, second, go).tokens;
  r.tokens.insert(r.tokens.end(), more.begin(), more.end());
  m.finish_recording();
  r.telemetry = m.cache->telemetry();
  if (device_slots > 0) {
    EXPECT_NE(m.tiers, nullptr) << "no device tier was made";
    r.device_telemetry = m.device_telemetry();
  }
  r.prefill_chunk = m.prefill_chunk;
  return r;
}

class RecordReplay : public ::testing::TestWithParam<const char*> {};

// A golden model's store, its prompt (at most 40 tokens), where to record its trace and its routing sizes.
struct Case {
  std::string store, trace_path;
  std::vector<int32_t> prompt;
  int top_k = 0, n_expert = 0;
};

Case prepare(const std::string& model, const std::string& trace_name) {
  Case c;
  c.prompt = golden_json(model)["teacher_forced"]["tokens"].get<std::vector<int32_t>>();
  if (c.prompt.size() > 40) c.prompt.resize(40);
  c.store = ingest_once(model);
  const std::string dir = std::string(DF_TEST_TMP) + "/traces";
  std::filesystem::create_directories(dir);
  c.trace_path = dir + "/" + trace_name + ".csv";
  df::ModelSourceOptions o;
  o.path = c.store;
  o.notice = [](const std::string&) {};
  df::OpenedModel probe = df::open_model(o);
  c.top_k = probe.model->info().n_expert_used;
  c.n_expert = probe.model->info().n_expert;
  return c;
}

df::stream::ReplayOptions replay_options(const Case& c, const Recorded& run, const char* policy,
                                         uint64_t slots) {
  df::stream::ReplayOptions ro;
  ro.slots = slots;
  ro.policy = df::stream::parse_policy(policy);
  ro.policy_options.top_k = c.top_k;
  ro.prefill_chunk = run.prefill_chunk;
  ro.n_expert = c.n_expert;
  return ro;
}

void expect_same_counts(const df::stream::TelemetrySnapshot& engine,
                        const std::vector<df::stream::LayerCounters>& replayed, const char* tier) {
  ASSERT_EQ(engine.layers.size(), replayed.size()) << tier;
  for (size_t l = 0; l < engine.layers.size(); ++l) {
    const auto& e = engine.layers[l];
    const auto& r = replayed[l];
    EXPECT_EQ(r.accesses, e.accesses) << tier << ", MoE layer " << l;
    EXPECT_EQ(r.hits, e.hits) << tier << ", MoE layer " << l;
    EXPECT_EQ(r.misses, e.misses) << tier << ", MoE layer " << l;
    EXPECT_EQ(r.reads, e.reads) << tier << ", MoE layer " << l;
  }
}

TEST_P(RecordReplay, ReplayingTheRecordedTraceGivesTheEngineTelemetryCounts) {
  const std::string model = GetParam();
  const Case c = prepare(model, model);
  const Recorded plain = generate_once(c.store, 1u << 20, "lru", "", c.prompt);
  for (const char* policy : df::stream::policy_names()) {
    // Budgets: one layer's top-k (the minimum), a little more, and a layer's worth of experts.
    for (const int s : {c.top_k, 2 * c.top_k + 1, c.n_expert}) {
      SCOPED_TRACE(testing::Message() << model << " " << policy << " slots " << s);
      const Recorded run = generate_once(c.store, static_cast<uint64_t>(s), policy, c.trace_path, c.prompt);
      EXPECT_EQ(run.tokens, plain.tokens) << "recording or the budget changed the output";

      const df::stream::RoutingTrace trace = df::stream::read_routing_trace(c.trace_path);
      ASSERT_EQ(trace.k, c.top_k);
      ASSERT_EQ(static_cast<size_t>(trace.n_layers), run.telemetry.layers.size());
      // Two sessions: the prompt's rows -n..-1 per layer, kDecode - 1 decode tokens (the first token comes
      // from the prefill's logits); the second prompt extends what the state holds by the last token only.
      size_t prompt_rows = 0;
      for (size_t r = 0; r < trace.rows(); ++r) prompt_rows += trace.prompt_row(r);
      EXPECT_EQ(prompt_rows, (c.prompt.size() + 1) * static_cast<size_t>(trace.n_layers));
      EXPECT_EQ(trace.rows() - prompt_rows, 2u * (kDecode - 1) * static_cast<size_t>(trace.n_layers));
      EXPECT_EQ(trace.pos.front(), -static_cast<int32_t>(c.prompt.size()));

      const df::stream::ReplayResult replayed =
          df::stream::replay_trace(trace, replay_options(c, run, policy, static_cast<uint64_t>(s)));
      expect_same_counts(run.telemetry, replayed.layers, "the cache");
      EXPECT_GT(run.telemetry.total.misses, 0u);
    }
  }
}

// The same with a device tier above the RAM tier: replay_two_tiers takes the tiered provider's decisions,
// so both tiers' counts per MoE layer are the engine's.
TEST_P(RecordReplay, ReplayingTwoTiersGivesBothTiersEngineCounts) {
  const std::string model = GetParam();
  const Case c = prepare(model, model + "-tiers");
  const Recorded plain = generate_once(c.store, 1u << 20, "lru", "", c.prompt);
  const uint64_t k = static_cast<uint64_t>(c.top_k), E = static_cast<uint64_t>(c.n_expert);
  // (device, RAM): the smallest tiers, equal tiers, a RAM tier four times the device tier's, and a RAM tier
  // smaller than the device tier (its records are pinned by copies and given back).
  const std::pair<uint64_t, uint64_t> sizes[] = {{k, k}, {2 * k + 1, 2 * k + 1}, {k + 1, 4 * k}, {E, 2 * k}};
  for (const char* policy : {"lru", "lfu", "slru"}) {
    for (const auto& [device, ram] : sizes) {
      SCOPED_TRACE(testing::Message() << model << " " << policy << " device " << device << " RAM " << ram);
      const Recorded run = generate_once(c.store, ram, policy, c.trace_path, c.prompt, device);
      EXPECT_EQ(run.tokens, plain.tokens) << "the tiers changed the output";
      const df::stream::RoutingTrace trace = df::stream::read_routing_trace(c.trace_path);
      df::stream::ReplayOptions ro = replay_options(c, run, policy, ram);
      ro.device_slots = device;
      const df::stream::ReplayResult replayed = df::stream::replay_trace(trace, ro);
      expect_same_counts(run.telemetry, replayed.layers, "the RAM tier");
      expect_same_counts(run.device_telemetry, replayed.device_layers, "the device tier");
      EXPECT_GT(run.device_telemetry.total.misses, 0u);
      EXPECT_GT(run.telemetry.total.reads, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, RecordReplay,
                         ::testing::Values("lfm2moe-tiny", "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny",
                                           "gemma4-tiny", "qwen35moe-tiny"));

}  // namespace

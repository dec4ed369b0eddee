#include "engine/model_source.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "backend/backend_factory.h"
#include "engine/memory_plan.h"
#include "gguf/tensor_names.h"
#include "models/expert_parallel.h"
#include "models/layer_split.h"
#include "models/state_size.h"
#include "store/ingest.h"
#include "store/progress.h"
#include "stream/byte_size.h"
#include "stream/cache_budget.h"
#include "stream/eviction_policy.h"
#include "stream/read_backend.h"
#include "stream/store_source.h"
#include "stream/streaming_expert_provider.h"
#include "util/cpu_limits.h"
#include "util/error.h"

namespace df {

namespace {

void default_notice(const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); }

// The expert tensors a model binds, described from the store's layout (their bytes stay in experts.bin).
void describe_experts(gguf::File& dense, const store::Layout& layout) {
  auto add = [&](const store::ExpertPart& p, int64_t rows) {
    if (dense.find_tensor(p.tensor)) return;  // the up half of a fused gate_up tensor: added with the gate
    gguf::TensorInfo t;
    t.name = p.tensor;
    t.n_dims = 3;
    t.ne = {p.n_in, rows, layout.n_expert, 1};
    t.type = p.type;
    t.nbytes =
        ggml_row_bytes(p.type, p.n_in) * static_cast<uint64_t>(rows) * static_cast<uint64_t>(layout.n_expert);
    dense.add_external_tensor(std::move(t));
  };
  for (const auto& l : layout.layers) {
    const bool fused = l.gate.tensor == l.up.tensor;
    add(l.gate, fused ? l.gate.n_out + l.up.n_out : l.gate.n_out);
    add(l.up, l.up.n_out);
    add(l.down, l.down.n_out);
  }
}

// -c 0: the training context, at most 4096 (a longer one only when asked: it costs memory).
int resolve_context(int n_ctx, const gguf::File& f) {
  if (n_ctx < 0) fail("context size -c {} must be positive", n_ctx);
  if (n_ctx > 0) return n_ctx;
  const int64_t train = f.get_int(f.architecture() + ".context_length").value_or(0);
  return train > 0 ? static_cast<int>(std::min<int64_t>(train, 4096)) : 4096;
}

// The device tier when --gpu-cache is not given (automatic_device_slots); a backend without memory of its
// own (the tests' stand-in) gets every record.
uint64_t default_device_slots(const backend::Backend& be, const store::Layout& layout,
                              const std::string& device, uint64_t min_slots, int sharers) {
  const std::optional<uint64_t> free_bytes = be.free_device_bytes();
  if (!free_bytes) return layout.n_records();
  return automatic_device_slots(*free_bytes, layout.n_records(), layout.record_bytes, min_slots, sharers,
                                device);
}

uint64_t tensor_bytes(const gguf::File& f, bool experts) {
  uint64_t n = 0;
  for (const auto& t : f.tensors())
    if (gguf::is_routed_expert_weight(t.name) == experts) n += t.nbytes;
  return n;
}

}  // namespace

void OpenedModel::on_step(uint64_t tokens, uint64_t ns) {
  if (cache) cache->record_step(tokens, ns);
  for (auto* t : device_tiers)
    if (t) t->record_step(tokens, ns);
}

void OpenedModel::on_failure() {
  if (!model) return;
  for (auto* p : ram_readers) p->abandon();
  for (auto* t : device_tiers)
    if (t) t->abandon();
}

stream::TelemetrySnapshot OpenedModel::device_telemetry() const {
  std::vector<stream::TelemetrySnapshot> parts;
  for (const auto* t : device_tiers)
    if (t) parts.push_back(t->telemetry());
  return stream::merge_disjoint_layers(parts);
}

void OpenedModel::reset_device_telemetry() {
  for (auto* t : device_tiers)
    if (t) t->reset_telemetry();
}

std::string OpenedModel::describe_device_tiers() const {
  std::string out;
  for (const auto* t : device_tiers)
    if (t) out += fmt::format("{}{}", out.empty() ? "" : "; ", t->describe());
  return out;
}

uint64_t OpenedModel::device_tier_bytes() const {
  uint64_t bytes = 0;
  for (const auto* t : device_tiers)
    if (t) bytes += t->slots() * t->slot_bytes();
  return bytes;
}

int64_t OpenedModel::batch_invariant_rows() const {
  int64_t rows = 0;
  for (const auto& be : backends) {
    const int64_t r = be->batch_invariant_rows();
    if (r > 0) rows = rows == 0 ? r : std::min(rows, r);
  }
  return rows;
}

void OpenedModel::finish_recording() {
  if (!routing) return;
  routing->finish();
  fmt::print(stderr, "routing: {} rows written to {}\n", routing->rows(), routing->path());
}

OpenedModel open_model(const ModelSourceOptions& options) {
  namespace fs = std::filesystem;
  const auto notice = options.notice ? options.notice : default_notice;
  if (options.path.empty()) fail("no model given: pass -m FILE.gguf or -m STORE_DIR");
  std::error_code ec;
  if (!fs::exists(options.path, ec)) fail("model '{}' does not exist", options.path);
  const bool is_dir = fs::is_directory(options.path, ec);
  if (options.resident && is_dir)
    fail("--resident needs a GGUF file, not the store directory '{}'", options.path);
  if (!options.store_dir.empty() && is_dir)
    fail("--store is for a GGUF given with -m; '{}' is already a store", options.path);

  OpenedModel m;
  models::LoadOptions load;
  m.n_threads = options.n_threads > 0 ? options.n_threads : read_cpu_limits().usable();
  load.n_threads = m.n_threads;
  const std::vector<std::string> devices = backend::device_list(options.device);
  const size_t n_dev = devices.size();
  for (const std::string& d : devices) m.backends.push_back(backend::make_backend({d, m.n_threads}));
  m.backend = m.backends.front();
  // --gpu-cache: one size for every device, or one each.
  std::vector<std::optional<uint64_t>> asked(n_dev, options.gpu_cache_bytes);
  if (!options.gpu_cache_per_device.empty()) {
    if (options.gpu_cache_per_device.size() != n_dev)
      fail("--gpu-cache lists {} sizes for {} device{} ({})", options.gpu_cache_per_device.size(), n_dev,
           n_dev == 1 ? "" : "s", fmt::join(devices, ","));
    for (size_t k = 0; k < n_dev; ++k) asked[k] = options.gpu_cache_per_device[k];
  }
  const bool any_asked = std::any_of(asked.begin(), asked.end(), [](const auto& a) { return a.has_value(); });
  if (options.resident && any_asked)
    fail("--resident keeps every expert in the device's memory: it cannot be combined with --gpu-cache");
  if (options.split_mode != "layer" && options.split_mode != "expert")
    fail("--split-mode {}: unknown (layer or expert)", options.split_mode);
  const bool expert_split = n_dev > 1 && options.split_mode == "expert";
  if (expert_split && !options.resident)
    fail(
        "--split-mode expert keeps every expert resident, spread over the devices: add --resident (a model "
        "streamed from its store splits by layer)");
  if (!options.tensor_split.empty() && options.tensor_split.size() != n_dev)
    fail("--tensor-split gives {} shares for {} device{} ({})", options.tensor_split.size(), n_dev,
         n_dev == 1 ? "" : "s", fmt::join(devices, ","));
  // A device with memory of its own has a tier; a host-memory device (the CPU) reads the RAM tier directly
  // beside a GPU, and has a tier only where no device has memory of its own (the stand-in tests run on).
  const bool any_gpu = std::any_of(m.backends.begin(), m.backends.end(),
                                   [](const auto& be) { return !be->reads_host_memory(); });
  std::vector<bool> device_tier(n_dev);
  for (size_t k = 0; k < n_dev; ++k) {
    const bool host = m.backends[k]->reads_host_memory();
    if (host && any_gpu) asked[k].reset();
    device_tier[k] = !host || asked[k].has_value();
  }
  m.device_tiers.assign(n_dev, nullptr);
  std::vector<
      std::function<std::unique_ptr<models::ExpertProvider>(const gguf::File&, const models::ExpertLayout&)>>
      make_provider(n_dev);
  load.prefetch_lookahead = options.lookahead;
  m.prefill_chunk = options.prefill_chunk;
  const auto memory = [&] { return options.memory ? *options.memory : stream::read_memory_snapshot(); };
  m.prompt_snapshot = options.prompt_snapshot;
  if (options.n_sequences < 1)
    fail("the number of parallel sequences {} must be at least 1", options.n_sequences);
  // States the plan holds beside the first session's own: every other session's, and each one's snapshot.
  const int snapshots = options.n_sequences * (options.prompt_snapshot ? 2 : 1) - 1;

  if (options.resident) {
    m.file = std::make_unique<gguf::File>(gguf::File::open(options.path));
    m.trunk_bytes = tensor_bytes(*m.file, false);
    m.expert_bytes = tensor_bytes(*m.file, true);
    m.n_ctx = resolve_context(options.n_ctx, *m.file);
    MemoryPlanInput in = memory_plan_input(*m.file, m.n_ctx, m.prefill_chunk, m.n_threads, snapshots);
    in.resident = true;
    in.resident_expert_bytes = m.expert_bytes;
    const MemoryPlan plan = plan_memory(in, memory());
    m.reserve_bytes = plan.reserve.total();
    m.cache_description = plan.description;
  } else {
    std::string dir = options.path;
    if (!is_dir) {
      // A context the memory cannot hold is refused before the ingest spends minutes on the file (the
      // expert cache is checked once the store says how large a record is).
      {
        const gguf::File source = gguf::File::open(options.path);
        check_memory(memory_plan_input(source, resolve_context(options.n_ctx, source), options.prefill_chunk,
                                       m.n_threads, snapshots),
                     memory());
      }
      store::TerminalProgress bar;
      store::IngestOptions io;
      io.output_dir = options.store_dir;
      io.wait_for_lock = true;
      io.progress = bar.fn();
      io.on_message = [&](const std::string& s) {
        bar.finish();
        notice("note: " + s);
      };
      dir = store::resolve_store(options.path, io);
    }
    m.store.emplace(store::Store::open(dir));
    const store::Layout& layout = m.store->layout();
    m.file = std::make_unique<gguf::File>(gguf::File::open(m.store->dense_path()));
    m.trunk_bytes = tensor_bytes(*m.file, false);
    m.expert_bytes = layout.experts_bytes();
    describe_experts(*m.file, layout);

    stream::ExpertCacheOptions co;
    co.io = stream::parse_io_mode(options.io);
    co.policy = stream::parse_policy(options.cache_policy);
    co.notice = notice;
    co.faults = options.faults;
    const int top_k =
        static_cast<int>(m.file->get_int(m.file->architecture() + ".expert_used_count").value_or(0));
    if (top_k <= 0) fail("{}: missing or invalid {}.expert_used_count", dir, m.file->architecture());
    // The state's batch buffers are planned for the chunk asked for; the cache may make it smaller, never
    // larger.
    m.n_ctx = resolve_context(options.n_ctx, *m.file);
    MemoryPlanInput in = memory_plan_input(*m.file, m.n_ctx, options.prefill_chunk, m.n_threads, snapshots);
    in.expert_cache_bytes = options.expert_cache_bytes;
    in.record_bytes = layout.record_bytes;
    in.total_records = layout.n_records();
    in.min_records = static_cast<uint64_t>(top_k);
    const MemoryPlan plan = plan_memory(in, memory());
    if (!plan.warning.empty()) notice(plan.warning);
    const stream::BudgetChoice& choice = plan.cache;
    m.reserve_bytes = plan.reserve.total();
    co.slots = choice.slots;
    co.min_slots = static_cast<uint64_t>(top_k);
    m.cache_description = choice.description;
    m.prefill_chunk = stream::max_prefill_chunk(choice.slots, top_k, layout.n_expert, options.prefill_chunk);
    const store::Store& st = *m.store;
    // One RAM tier for every device: made by the first stage that asks.
    auto ram_tier = [&m, &st, co]() -> stream::ExpertCache& {
      if (!m.cache) m.cache = std::make_unique<stream::ExpertCache>(stream::record_source_of(st), co);
      return *m.cache;
    };
    for (size_t k = 0; k < n_dev; ++k) {
      if (!device_tier[k]) {
        make_provider[k] = [&m, &st, ram_tier](
                               const gguf::File&,
                               const models::ExpertLayout& ml) -> std::unique_ptr<models::ExpertProvider> {
          stream::check_layout_matches(st.layout(), ml, st.dir());
          auto p = std::make_unique<stream::StreamingExpertProvider>(ram_tier());
          m.ram_readers.push_back(p.get());
          return p;
        };
        continue;
      }
      stream::DeviceTierOptions dt;
      dt.min_slots = static_cast<uint64_t>(top_k);
      dt.policy = co.policy;
      dt.cpu_misses = options.cpu_misses;
      dt.miss_copies = options.miss_copies;
      dt.notice = notice;
      const std::optional<uint64_t> asked_k = asked[k];
      const std::string device = devices[k];
      int sharers = 0;  // automatic tiers on this device from this stage on
      for (size_t j = k; j < n_dev; ++j) sharers += devices[j] == device && device_tier[j] && !asked[j];
      backend::Backend& be = *m.backends[k];
      // The chunk must fit the device tier too (its slots are known only once the trunk is loaded: planned
      // here from the size asked for, or all records when automatic, and trimmed below).
      if (asked_k)
        m.prefill_chunk = stream::max_prefill_chunk(std::max<uint64_t>(*asked_k / layout.record_bytes, 1),
                                                    top_k, layout.n_expert, m.prefill_chunk);
      make_provider[k] = [&m, &st, &be, ram_tier, dt, asked_k, device, sharers, notice, n_dev, k](
                             const gguf::File&,
                             const models::ExpertLayout& ml) -> std::unique_ptr<models::ExpertProvider> {
        stream::check_layout_matches(st.layout(), ml, st.dir());
        stream::DeviceTierOptions o = dt;
        o.slots = asked_k ? *asked_k / st.layout().record_bytes
                          : default_device_slots(be, st.layout(), device, o.min_slots, sharers);
        auto p = std::make_unique<stream::TieredExpertProvider>(ram_tier(), be, o);
        if (!m.tiers) m.tiers = p.get();
        m.device_tiers[k] = p.get();
        m.prefill_chunk = stream::max_prefill_chunk(p->slots(), static_cast<int>(o.min_slots),
                                                    st.layout().n_expert, m.prefill_chunk);
        const std::string on = n_dev > 1 ? " on " + device : "";
        m.cache_description = fmt::format("{}; device tier{} {}", m.cache_description, on, p->describe());
        if (!asked_k)
          notice(fmt::format("--gpu-cache not given: the device tier{} holds {}", on, p->describe()));
        return p;
      };
    }
  }

  // Each device's share of a split: --tensor-split, else in proportion to free device memory when every
  // device reports it (llama.cpp's default split), else equal.
  const auto split_shares = [&] {
    std::vector<double> shares = options.tensor_split;
    if (shares.empty()) {
      for (const auto& be : m.backends)
        if (const auto free_bytes = be->free_device_bytes())
          shares.push_back(static_cast<double>(*free_bytes));
      if (shares.size() != n_dev) shares.assign(n_dev, 1.0);
    }
    return shares;
  };
  if (expert_split) {
    // The trunk on the first device, each device a range of every layer's experts.
    load.backend = m.backend;
    const std::vector<double> shares = split_shares();
    load.make_expert_provider =
        [&m, &devices, shares](const gguf::File& file,
                               const models::ExpertLayout& ml) -> std::unique_ptr<models::ExpertProvider> {
      if (ml.layers.empty()) fail("--split-mode expert: the model has no MoE layer to spread");
      m.expert_ranges = models::split_items(ml.layers.front().n_expert, shares, "expert");
      std::vector<experts::ExpertPart> parts;
      std::string split;
      for (size_t k = 0; k < m.backends.size(); ++k) {
        const auto [first, end] = m.expert_ranges[k];
        parts.push_back({m.backends[k].get(), first, end});
        split += fmt::format("{}{} experts {}-{}", k ? ", " : "", devices[k], first, end - 1);
      }
      m.cache_description = fmt::format("{}; experts split: {}", m.cache_description, split);
      return std::make_unique<models::ExpertParallelProvider>(file, ml, *m.backend, std::move(parts));
    };
    m.model = models::load_model(*m.file, load);
    m.layer_ranges.assign(n_dev, {0, 0});
    m.layer_ranges.front() = {0, m.model->info().n_layer};
  } else if (n_dev == 1) {
    load.backend = m.backend;
    load.make_expert_provider = make_provider.front();
    m.model = models::load_model(*m.file, load);
    m.layer_ranges = {{0, m.model->info().n_layer}};
  } else {
    m.layer_ranges = models::split_layers(models::state_dims(*m.file).n_layer, split_shares());
    std::vector<models::LoadOptions> stages;
    std::string split;
    for (size_t k = 0; k < n_dev; ++k) {
      models::LoadOptions o = load;
      o.backend = m.backends[k];
      o.first_layer = m.layer_ranges[k].first;
      o.end_layer = m.layer_ranges[k].second;
      o.make_expert_provider = make_provider[k];
      stages.push_back(o);
      split += fmt::format("{}{} layers {}-{}", k ? ", " : "", devices[k], o.first_layer, o.end_layer - 1);
    }
    m.model = models::load_layer_split(*m.file, stages);
    m.cache_description = fmt::format("{}; layers split: {}", m.cache_description, split);
  }

  if (!options.record_routing.empty()) {
    m.routing = std::make_unique<RoutingRecorder>(options.record_routing);
    m.model->set_routing_sink(m.routing.get());
  }
  m.tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_gguf(*m.file));
  if (static_cast<int>(m.tokenizer->n_vocab()) != m.model->info().n_vocab)
    fail("{}: the vocabulary has {} tokens but the output layer has {} rows", options.path,
         m.tokenizer->n_vocab(), m.model->info().n_vocab);
  m.chat_template = m.file->get_string("tokenizer.chat_template");
  return m;
}

}  // namespace df

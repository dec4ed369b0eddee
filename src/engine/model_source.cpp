#include "engine/model_source.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "gguf/tensor_names.h"
#include "store/ingest.h"
#include "store/progress.h"
#include "stream/cache_budget.h"
#include "stream/eviction_policy.h"
#include "stream/read_backend.h"
#include "stream/store_source.h"
#include "stream/streaming_expert_provider.h"
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

uint64_t tensor_bytes(const gguf::File& f, bool experts) {
  uint64_t n = 0;
  for (const auto& t : f.tensors())
    if (gguf::is_routed_expert_weight(t.name) == experts) n += t.nbytes;
  return n;
}

}  // namespace

void OpenedModel::on_step(uint64_t tokens, uint64_t ns) {
  if (cache) cache->record_step(tokens, ns);
}

void OpenedModel::on_failure() {
  if (!model) return;
  if (auto* p = dynamic_cast<stream::StreamingExpertProvider*>(&model->experts())) p->abandon();
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
  load.n_threads = options.n_threads;
  load.prefetch_lookahead = options.lookahead;
  m.prefill_chunk = options.prefill_chunk;

  if (options.resident) {
    m.file = std::make_unique<gguf::File>(gguf::File::open(options.path));
    m.trunk_bytes = tensor_bytes(*m.file, false);
    m.expert_bytes = tensor_bytes(*m.file, true);
    m.cache_description = "experts: all resident in RAM (--resident)";
  } else {
    std::string dir = options.path;
    if (!is_dir) {
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
    stream::BudgetRequest br;
    br.explicit_bytes = options.expert_cache_bytes;
    // The trunk, its working buffers and the KV cache stay beside the expert cache: a generous estimate of
    // them (the trunk again for buffers and KV of long contexts would be far too much; 1/4 of it plus 256 MiB
    // covers the models we run).
    br.reserve_bytes = m.trunk_bytes + m.trunk_bytes / 4 + (256ull << 20);
    br.record_bytes = layout.record_bytes;
    br.total_records = layout.n_records();
    br.min_records = static_cast<uint64_t>(top_k);
    stream::BudgetChoice choice = stream::choose_expert_budget(br, stream::read_memory_snapshot());
    co.slots = choice.slots;
    co.min_slots = static_cast<uint64_t>(top_k);
    m.cache_description = choice.description;
    m.prefill_chunk = stream::max_prefill_chunk(choice.slots, top_k, layout.n_expert, options.prefill_chunk);
    const store::Store& st = *m.store;
    load.make_expert_provider =
        [&m, &st, co](const gguf::File&,
                      const models::ExpertLayout& ml) -> std::unique_ptr<models::ExpertProvider> {
      stream::check_layout_matches(st.layout(), ml, st.dir());
      m.cache = std::make_unique<stream::ExpertCache>(stream::record_source_of(st), co);
      return std::make_unique<stream::StreamingExpertProvider>(*m.cache);
    };
  }

  m.model = models::load_model(*m.file, load);
  m.tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_gguf(*m.file));
  if (static_cast<int>(m.tokenizer->n_vocab()) != m.model->info().n_vocab)
    fail("{}: the vocabulary has {} tokens but the output layer has {} rows", options.path,
         m.tokenizer->n_vocab(), m.model->info().n_vocab);
  m.chat_template = m.file->get_string("tokenizer.chat_template");
  return m;
}

}  // namespace df

#include <filesystem>

#include "store/ingest_steps.h"
#include "store/record_io.h"
#include "util/error.h"

namespace df::store {

std::vector<DenseTensorEntry> write_dense(const gguf::File& src, const StorePlan& plan,
                                          const std::string& dir, const SourceInfo& source,
                                          const IngestOptions& opt) {
  gguf::Writer w(static_cast<uint32_t>(kRecordAlign));
  for (const auto& [key, value] : src.metadata()) w.set(key, value);
  // Replaced in place: the writer pads to its own alignment and the reader must find the same value.
  w.set("general.alignment", gguf::Value::of_u32(static_cast<uint32_t>(kRecordAlign)));
  w.set("diskformer.store.format_version", gguf::Value::of_u32(kFormatVersion));
  w.set("diskformer.store.source_name", gguf::Value::of_string(source.name));
  w.set("diskformer.store.source_size", gguf::Value::of_u64(source.size));
  w.set("diskformer.store.source_sha256", gguf::Value::of_string(source.sha256));
  w.set("diskformer.store.n_expert", gguf::Value::of_u32(static_cast<uint32_t>(plan.layout.n_expert)));
  std::vector<int32_t> moe_layers;
  for (const auto& l : plan.layout.layers) moe_layers.push_back(l.layer);
  w.set("diskformer.store.moe_layers", gguf::Value::of_i32s(moe_layers));
  w.set("diskformer.store.record_bytes", gguf::Value::of_u64(plan.layout.record_bytes));

  std::vector<DenseTensorEntry> entries;
  uint64_t total = 0;
  for (const gguf::TensorInfo* t : plan.dense) {
    DenseTensorEntry e;
    e.name = t->name;
    e.type = t->type;
    e.ne.assign(t->ne.begin(), t->ne.begin() + t->n_dims);
    e.bytes = t->nbytes;
    total += t->nbytes;
    w.add_tensor({e.name, e.type, e.ne});
    entries.push_back(std::move(e));
  }
  uint64_t done = 0;
  w.write((std::filesystem::path(dir) / kDenseFile).string(), [&](size_t i, std::span<uint8_t> out) {
    const gguf::TensorInfo& t = *plan.dense[i];
    if (out.size() != t.nbytes)
      fail("dense tensor '{}': {} bytes expected, {} given", t.name, t.nbytes, out.size());
    src.read_tensor(t, out.data());
    entries[i].xxh3 = record_xxh3(out.data(), out.size());
    done += out.size();
    if (opt.progress) opt.progress("writing dense", done, total);
  });
  return entries;
}

}  // namespace df::store

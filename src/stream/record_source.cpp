#include "stream/record_source.h"

#include "util/error.h"

namespace df::stream {
namespace {

void check_part(const std::string& path, int layer, const char* what, const store::ExpertPart& p,
                uint64_t record_bytes) {
  if (p.offset + p.bytes > record_bytes || p.offset + p.bytes < p.offset)
    fail(
        "{}: MoE layer {} {} rows (bytes {}..{}) do not fit in a record of {} bytes; re-run diskformer "
        "ingest",
        path, layer, what, p.offset, p.offset + p.bytes, record_bytes);
}

}  // namespace

void RecordSource::validate() const {
  const store::Layout& l = layout;
  if (l.n_moe_layers <= 0 || l.n_expert <= 0 || l.record_bytes == 0)
    fail("{}: the store layout has {} MoE layers of {} experts, records of {} bytes: nothing to stream",
         experts_path, l.n_moe_layers, l.n_expert, l.record_bytes);
  if (l.record_bytes % store::kRecordAlign != 0)
    fail("{}: records of {} bytes are not a multiple of {}; re-run diskformer ingest", experts_path,
         l.record_bytes, store::kRecordAlign);
  if (l.layers.size() != static_cast<size_t>(l.n_moe_layers))
    fail("{}: the layout lists {} MoE layers but says there are {}", experts_path, l.layers.size(),
         l.n_moe_layers);
  const size_t n_records = static_cast<size_t>(l.n_moe_layers) * static_cast<size_t>(l.n_expert);
  if (checksums.size() != n_records)
    fail("{}: {} record checksums for {} records", experts_path, checksums.size(), n_records);
  for (int i = 0; i < l.n_moe_layers; ++i) {
    const auto& m = l.layers[static_cast<size_t>(i)];
    check_part(experts_path, i, "gate", m.gate, l.record_bytes);
    check_part(experts_path, i, "up", m.up, l.record_bytes);
    check_part(experts_path, i, "down", m.down, l.record_bytes);
  }
}

}  // namespace df::stream

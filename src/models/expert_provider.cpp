#include "models/expert_provider.h"

#include "gguf/gguf.h"
#include "util/error.h"

namespace df::models {
namespace {

// Experts [first, first + count) of the tensor.
struct ExpertSlabs {
  int first = 0, count = 0;
};

// Those experts' matrices of one kind, read straight into the backend's upload buffer: n_out rows from row0
// on of each expert's slab of `slab_rows` rows (the whole slab, or one half of a fused gate_up slab), so that
// the backend gets the same stack from a fused tensor as from separate ones.
backend::UploadedWeights upload_all(const gguf::File& file, backend::Backend& backend,
                                    const std::string& name, GgmlType type, int64_t n_in, int64_t n_out,
                                    int64_t slab_rows, int64_t row0, int n_expert, ExpertSlabs slabs) {
  const gguf::TensorInfo& t = file.require_tensor(name);
  const size_t row_bytes = ggml_row_bytes(type, n_in);
  const size_t slab_bytes = row_bytes * static_cast<size_t>(slab_rows);
  const size_t expected = slab_bytes * static_cast<size_t>(n_expert);
  if (t.nbytes != expected)
    fail("{}: tensor '{}' holds {} bytes, the expert layout needs {}", file.path(), name, t.nbytes, expected);
  backend::WeightSource src;
  src.type = type;
  if (slab_rows == n_out && slabs.count == n_expert) {
    src.read = [&](uint8_t* dst) { file.read_tensor(t, dst); };
  } else {
    if (t.external)
      fail("{}: tensor '{}' is not stored in this file (it lives in the expert store)", file.path(), name);
    src.read = [&](uint8_t* dst) {
      const size_t matrix_bytes = row_bytes * static_cast<size_t>(n_out);
      const uint64_t first = t.file_offset + row_bytes * static_cast<uint64_t>(row0);
      for (int i = 0; i < slabs.count; ++i)
        file.read_range(first + slab_bytes * static_cast<uint64_t>(slabs.first + i), matrix_bytes,
                        dst + matrix_bytes * static_cast<size_t>(i));
    };
  }
  src.n_in = n_in;
  src.n_out = n_out;
  src.n_matrices = slabs.count;
  return backend.upload_weights(src);
}

}  // namespace

ResidentExpertProvider::ResidentExpertProvider(const gguf::File& file, const ExpertLayout& layout,
                                               backend::Backend& backend, int first_layer, int end_layer) {
  load(file, layout, backend, first_layer, end_layer);
}

ResidentExpertProvider::ResidentExpertProvider(const gguf::File& file, const ExpertLayout& layout,
                                               backend::Backend& backend, ExpertRange experts)
    : first_expert_(experts.first_expert), end_expert_(experts.end_expert) {
  for (const auto& l : layout.layers)
    if (experts.first_expert < 0 || experts.end_expert <= experts.first_expert ||
        experts.end_expert > l.n_expert)
      fail("expert provider: experts {}-{} are not a range of MoE layer {}'s {} experts",
           experts.first_expert, experts.end_expert - 1, &l - layout.layers.data(), l.n_expert);
  load(file, layout, backend, 0, -1);
}

void ResidentExpertProvider::load(const gguf::File& file, const ExpertLayout& layout,
                                  backend::Backend& backend, int first_layer, int end_layer) {
  layers_.reserve(layout.layers.size());
  for (const auto& l : layout.layers) {
    Layer& layer = layers_.emplace_back();
    layer.layout = l;
    layer.held = l.model_layer >= first_layer && (end_layer < 0 || l.model_layer < end_layer);
    if (!layer.held) continue;
    const ExpertSlabs slabs{first_expert_, (end_expert_ < 0 ? l.n_expert : end_expert_) - first_expert_};
    const int64_t gate_up_rows = l.gate_up_slab_rows();
    layer.gate = upload_all(file, backend, l.gate_name, l.gate_type, l.n_embd, l.n_ff, gate_up_rows,
                            l.gate_row0, l.n_expert, slabs);
    layer.up = upload_all(file, backend, l.up_name, l.up_type, l.n_embd, l.n_ff, gate_up_rows, l.up_row0,
                          l.n_expert, slabs);
    layer.down =
        upload_all(file, backend, l.down_name, l.down_type, l.n_ff, l.n_embd, l.n_embd, 0, l.n_expert, slabs);
  }
}

const ResidentExpertProvider::Layer& ResidentExpertProvider::held_layer(int moe_layer) const {
  if (moe_layer < 0 || moe_layer >= static_cast<int>(layers_.size()))
    fail("expert provider: MoE layer {} out of range ({} layers)", moe_layer, layers_.size());
  const Layer& l = layers_[static_cast<size_t>(moe_layer)];
  if (!l.held)
    fail("expert provider: MoE layer {} (model layer {}) is computed by another stage of the layer split",
         moe_layer, l.layout.model_layer);
  return l;
}

std::optional<backend::RoutedExperts> ResidentExpertProvider::resident_stacks(int moe_layer) const {
  const Layer& l = held_layer(moe_layer);
  if (end_expert_ >= 0) return std::nullopt;  // a part of the layer's experts
  backend::RoutedExperts ex;
  ex.gate = {l.gate.first, l.gate.slab_bytes};
  ex.up = {l.up.first, l.up.slab_bytes};
  ex.down = {l.down.first, l.down.slab_bytes};
  ex.n_expert = l.layout.n_expert;
  return ex;
}

ExpertView ResidentExpertProvider::acquire(int moe_layer, int expert) {
  const Layer& l = held_layer(moe_layer);
  if (expert < 0 || expert >= l.layout.n_expert)
    fail("expert provider: expert {} out of range (MoE layer {} has {})", expert, moe_layer,
         l.layout.n_expert);
  const int end = end_expert_ < 0 ? l.layout.n_expert : end_expert_;
  if (expert < first_expert_ || expert >= end)
    fail(
        "expert provider: expert {} of MoE layer {} lives in another part of the expert split (this one "
        "holds {}-{})",
        expert, moe_layer, first_expert_, end - 1);
  const int64_t i = expert - first_expert_;
  const backend::Weight g = l.gate.matrix(i), u = l.up.matrix(i), d = l.down.matrix(i);
  return ExpertView{g.data, u.data, d.data, g.type, u.type, d.type, g.packing, u.packing, d.packing};
}

size_t ResidentExpertProvider::bytes() const {
  size_t total = 0;
  for (const auto& l : layers_) total += l.gate.memory.bytes() + l.up.memory.bytes() + l.down.memory.bytes();
  return total;
}

}  // namespace df::models

#include "models/expert_provider.h"

#include "gguf/gguf.h"
#include "util/error.h"

namespace df::models {
namespace {

HugePageBuffer read_whole(const gguf::File& file, const std::string& name, size_t expected) {
  const gguf::TensorInfo& t = file.require_tensor(name);
  if (t.nbytes != expected)
    fail("{}: tensor '{}' holds {} bytes, the expert layout needs {}", file.path(), name, t.nbytes, expected);
  HugePageBuffer bytes(expected, "resident experts");
  file.read_tensor(t, bytes.data());
  return bytes;
}

// Repacks each expert's n_out x n_in slab of `bytes` in place where a packing applies.
quant::RowPacking pack_slabs(const backend::Backend& backend, HugePageBuffer& bytes, GgmlType type,
                             int64_t n_in, int64_t n_out) {
  const quant::RowPacking packing = backend.preferred_packing(type, n_out);
  if (packing == quant::RowPacking::kQ4_0x16) {
    const size_t slab = ggml_row_bytes(type, n_in) * static_cast<size_t>(n_out);
    std::vector<uint8_t> group(ggml_row_bytes(type, n_in) * quant::kQ4_0x16Rows);
    for (size_t off = 0; off + slab <= bytes.size(); off += slab)
      quant::pack_q4_0x16_in_place(bytes.data() + off, n_out, n_in, group.data());
  }
  return packing;
}

}  // namespace

ResidentExpertProvider::ResidentExpertProvider(const gguf::File& file, const ExpertLayout& layout,
                                               const backend::Backend& backend) {
  layers_.reserve(layout.layers.size());
  for (const auto& l : layout.layers) {
    const size_t n = static_cast<size_t>(l.n_expert);
    Layer layer{l, read_whole(file, l.gate_name, l.gate_bytes() * n),
                read_whole(file, l.up_name, l.up_bytes() * n),
                read_whole(file, l.down_name, l.down_bytes() * n)};
    layer.gate_packing = pack_slabs(backend, layer.gate, l.gate_type, l.n_embd, l.n_ff);
    layer.up_packing = pack_slabs(backend, layer.up, l.up_type, l.n_embd, l.n_ff);
    layer.down_packing = pack_slabs(backend, layer.down, l.down_type, l.n_ff, l.n_embd);
    layers_.push_back(std::move(layer));
  }
}

ExpertView ResidentExpertProvider::acquire(int moe_layer, int expert) {
  if (moe_layer < 0 || moe_layer >= static_cast<int>(layers_.size()))
    fail("expert provider: MoE layer {} out of range ({} layers)", moe_layer, layers_.size());
  const Layer& l = layers_[static_cast<size_t>(moe_layer)];
  if (expert < 0 || expert >= l.layout.n_expert)
    fail("expert provider: expert {} out of range (MoE layer {} has {})", expert, moe_layer,
         l.layout.n_expert);
  const size_t e = static_cast<size_t>(expert);
  return ExpertView{l.gate.data() + e * l.layout.gate_bytes(),
                    l.up.data() + e * l.layout.up_bytes(),
                    l.down.data() + e * l.layout.down_bytes(),
                    l.layout.gate_type,
                    l.layout.up_type,
                    l.layout.down_type,
                    l.gate_packing,
                    l.up_packing,
                    l.down_packing};
}

size_t ResidentExpertProvider::bytes() const {
  size_t total = 0;
  for (const auto& l : layers_) total += l.gate.size() + l.up.size() + l.down.size();
  return total;
}

}  // namespace df::models

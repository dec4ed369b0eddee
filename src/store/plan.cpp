#include "store/plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include "gguf/tensor_names.h"
#include "store/manifest.h"
#include "util/error.h"

namespace df::store {

namespace {

using gguf::ExpertTensorKind;

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

struct LayerTensors {
  const gguf::TensorInfo *gate = nullptr, *up = nullptr, *down = nullptr, *gate_up = nullptr;
};

void require_3d(const std::string& file, const gguf::TensorInfo& t) {
  if (t.n_dims != 3)
    fail("{}: routed-expert tensor '{}' has shape {}, expected 3 dimensions {{in, out, n_expert}}", file,
         t.name, t.shape_string());
}

ExpertPart make_part(const gguf::TensorInfo& t, int64_t n_out, int64_t first_row) {
  ExpertPart p;
  p.tensor = t.name;
  p.type = t.type;
  p.n_in = t.ne[0];
  p.n_out = n_out;
  p.first_row = first_row;
  p.bytes = ggml_row_bytes(t.type, t.ne[0]) * static_cast<uint64_t>(n_out);
  p.packing = quant::preferred_packing(t.type, n_out);
  return p;
}

MoeLayerLayout plan_layer(const std::string& file, int layer, const LayerTensors& lt) {
  MoeLayerLayout l;
  l.layer = layer;
  if (lt.gate_up && (lt.gate || lt.up))
    fail("{}: blk.{} has both a fused ffn_gate_up_exps and a separate ffn_gate_exps/ffn_up_exps", file,
         layer);
  if (!lt.down)
    fail("{}: blk.{} has routed-expert gate/up tensors but no blk.{}.ffn_down_exps.weight", file, layer,
         layer);
  require_3d(file, *lt.down);
  const int64_t H = lt.down->ne[1], F = lt.down->ne[0];
  if (lt.gate_up) {
    const auto& t = *lt.gate_up;
    require_3d(file, t);
    if (t.ne[0] != H || t.ne[1] != 2 * F)
      fail("{}: '{}' has shape {}, but '{}' {} implies {{{}, {}, E}}", file, t.name, t.shape_string(),
           lt.down->name, lt.down->shape_string(), H, 2 * F);
    l.gate = make_part(t, F, 0);
    l.up = make_part(t, F, F);
  } else {
    if (!lt.gate || !lt.up)
      fail("{}: blk.{} lacks blk.{}.ffn_{}_exps.weight (it has the other routed-expert tensors)", file, layer,
           layer, lt.gate ? "up" : "gate");
    for (const auto* t : {lt.gate, lt.up}) {
      require_3d(file, *t);
      if (t->ne[0] != H || t->ne[1] != F)
        fail("{}: '{}' has shape {}, but '{}' {} implies {{{}, {}, E}}", file, t->name, t->shape_string(),
             lt.down->name, lt.down->shape_string(), H, F);
    }
    l.gate = make_part(*lt.gate, F, 0);
    l.up = make_part(*lt.up, F, 0);
  }
  l.down = make_part(*lt.down, H, 0);
  l.gate.offset = 0;
  l.up.offset = align_up(l.gate.bytes, kPartAlign);
  l.down.offset = align_up(l.up.offset + l.up.bytes, kPartAlign);
  return l;
}

}  // namespace

StorePlan plan_store(const gguf::File& src) {
  const std::string& file = src.path();
  if (auto splits = src.get_int("split.count"); splits && *splits > 1)
    fail(
        "{} is part 1 of a {}-file GGUF; ingest needs one file: merge the parts first (llama-gguf-split "
        "--merge)",
        file, *splits);
  std::map<int, LayerTensors> by_layer;
  StorePlan plan;
  for (const auto& t : src.tensors()) {
    auto name = gguf::parse_expert_tensor_name(t.name);
    if (!name) {
      plan.dense.push_back(&t);
      continue;
    }
    LayerTensors& lt = by_layer[name->layer];
    const gguf::TensorInfo** slot = name->kind == ExpertTensorKind::Gate   ? &lt.gate
                                    : name->kind == ExpertTensorKind::Up   ? &lt.up
                                    : name->kind == ExpertTensorKind::Down ? &lt.down
                                                                           : &lt.gate_up;
    *slot = &t;
  }
  if (by_layer.empty())
    fail(
        "{} has no routed-expert tensors (blk.N.ffn_{{gate,up,down}}_exps.weight): it is not a "
        "Mixture-of-Experts "
        "model, so there is nothing to stream",
        file);

  Layout& layout = plan.layout;
  const gguf::TensorInfo* first_down = nullptr;
  for (const auto& [layer, lt] : by_layer) {
    MoeLayerLayout l = plan_layer(file, layer, lt);
    int64_t E = lt.down->ne[2];
    if (E <= 0 || E > 1 << 16) fail("{}: '{}' has {} experts, out of range", file, lt.down->name, E);
    for (const auto* t : {lt.gate, lt.up, lt.gate_up})
      if (t && t->ne[2] != E)
        fail("{}: '{}' has {} experts but '{}' has {}", file, t->name, t->ne[2], lt.down->name, E);
    if (!first_down) {
      first_down = lt.down;
      layout.n_expert = static_cast<int>(E);
    } else if (E != layout.n_expert) {
      fail("{}: '{}' has {} experts but '{}' has {}: every MoE layer must have the same number of experts",
           file, lt.down->name, E, first_down->name, layout.n_expert);
    }
    layout.record_bytes = std::max(layout.record_bytes, align_up(l.down.offset + l.down.bytes, kRecordAlign));
    layout.layers.push_back(std::move(l));
  }
  layout.n_moe_layers = static_cast<int>(layout.layers.size());
  validate_layout(layout);
  // Parts are referenced by pointer from here on: the layers vector no longer changes.
  for (auto& l : layout.layers) {
    std::vector<SourceSlabs> sources;
    for (const ExpertPart* p : {&l.gate, &l.up, &l.down}) {
      const gguf::TensorInfo& t = src.require_tensor(p->tensor);
      auto it =
          std::find_if(sources.begin(), sources.end(), [&](const SourceSlabs& s) { return s.tensor == &t; });
      if (it == sources.end()) {
        SourceSlabs s;
        s.tensor = &t;
        s.row_bytes = ggml_row_bytes(t.type, t.ne[0]);
        s.slab_bytes = s.row_bytes * static_cast<uint64_t>(t.ne[1]);
        if (s.slab_bytes * static_cast<uint64_t>(layout.n_expert) != t.nbytes)
          fail("{}: '{}' is {} bytes, but {} experts of {} rows of {} bytes are {}", file, t.name, t.nbytes,
               layout.n_expert, t.ne[1], s.row_bytes, s.slab_bytes * static_cast<uint64_t>(layout.n_expert));
        sources.push_back(s);
        it = sources.end() - 1;
      }
      it->parts.push_back(p);
    }
    std::sort(sources.begin(), sources.end(), [](const SourceSlabs& a, const SourceSlabs& b) {
      return a.tensor->file_offset < b.tensor->file_offset;
    });
    plan.sources.push_back(std::move(sources));
  }
  return plan;
}

}  // namespace df::store

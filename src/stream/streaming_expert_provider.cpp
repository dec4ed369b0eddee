#include "stream/streaming_expert_provider.h"

#include "util/error.h"

namespace df::stream {
namespace {

void check_part(const std::string& path, int layer, const char* what, const store::ExpertPart& part,
                GgmlType type, uint64_t bytes, int64_t first_row = 0) {
  if (part.type != type || part.bytes != bytes)
    fail(
        "{}: MoE layer {} {} rows are {} bytes of {} in the store, the model expects {} bytes of {}; the "
        "store "
        "was ingested from another model: re-run diskformer ingest",
        path, layer, what, part.bytes, ggml_type_name(part.type), bytes, ggml_type_name(type));
  // Gate and up fused in one tensor (ffn_gate_up_exps) in one and separate in the other: the bytes may
  // agree, but the records were cut from another file.
  if (part.first_row != first_row)
    fail(
        "{}: MoE layer {} {} rows start at row {} of each expert's slab of '{}' in the store, at row {} in "
        "the model; the store was ingested from another file: re-run diskformer ingest",
        path, layer, what, part.first_row, part.tensor, first_row);
}

}  // namespace

void check_layout_matches(const store::Layout& s, const experts::ExpertLayout& m, const std::string& path) {
  // The store holds every MoE block of the file; blocks the model does not run (trailing MTP blocks) may
  // follow the model's own.
  size_t unrun = 0;
  for (const store::MoeLayerLayout& sl : s.layers) unrun += sl.layer >= m.unrun_from_layer ? 1 : 0;
  if (static_cast<size_t>(s.n_moe_layers) != m.layers.size() + unrun)
    fail("{}: the store has {} MoE layers, the model {}; re-run diskformer ingest", path,
         static_cast<size_t>(s.n_moe_layers) - unrun, m.layers.size());
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const experts::ExpertLayerLayout& ml = m.layers[i];
    const store::MoeLayerLayout& sl = s.layers[i];
    const int layer = static_cast<int>(i);
    if (sl.layer != ml.model_layer)
      fail("{}: MoE layer {} is block {} in the store, block {} in the model; re-run diskformer ingest", path,
           layer, sl.layer, ml.model_layer);
    if (ml.n_expert != s.n_expert)
      fail("{}: MoE layer {} has {} experts in the store, {} in the model; re-run diskformer ingest", path,
           layer, s.n_expert, ml.n_expert);
    check_part(path, layer, "gate", sl.gate, ml.gate_type, ml.gate_bytes(), ml.gate_row0);
    check_part(path, layer, "up", sl.up, ml.up_type, ml.up_bytes(), ml.up_row0);
    check_part(path, layer, "down", sl.down, ml.down_type, ml.down_bytes());
  }
}

StreamingExpertProvider::StreamingExpertProvider(ExpertCache& cache) : cache_(cache) {
  const store::Layout& l = cache.source().layout;
  const size_t n_keys = static_cast<size_t>(l.n_moe_layers) * static_cast<size_t>(l.n_expert);
  announced_slot_.assign(n_keys, -1);
  held_slot_.assign(n_keys, -1);
  held_count_.assign(n_keys, 0);
  announced_keys_.reserve(static_cast<size_t>(l.n_expert));
  scratch_.resize(static_cast<size_t>(l.n_expert));
}

int StreamingExpertProvider::key_checked(int moe_layer, int expert, const char* what) const {
  const store::Layout& l = cache_.source().layout;
  if (moe_layer < 0 || moe_layer >= l.n_moe_layers)
    fail("expert provider {}: MoE layer {} out of range ({} layers)", what, moe_layer, l.n_moe_layers);
  if (expert < 0 || expert >= l.n_expert)
    fail("expert provider {}: expert {} out of range (MoE layer {} has {})", what, expert, moe_layer,
         l.n_expert);
  return moe_layer * l.n_expert + expert;
}

void StreamingExpertProvider::prefetch(int moe_layer, std::span<const int32_t> guessed_ids) {
  cache_.prefetch(moe_layer, guessed_ids);
}

// Pins announced earlier but never acquired (the model changed its mind) must not leak.
void StreamingExpertProvider::release_unclaimed() {
  const int n_expert = cache_.source().layout.n_expert;
  for (int32_t key : announced_keys_) {
    int32_t& slot = announced_slot_[static_cast<size_t>(key)];
    if (slot < 0) continue;
    cache_.release(ExpertHandle{slot, key / n_expert, key % n_expert});
    slot = -1;
  }
  announced_keys_.clear();
}

void StreamingExpertProvider::release_spare() {
  std::lock_guard lock(mu_);
  release_unclaimed();
}

void StreamingExpertProvider::will_acquire(int moe_layer, std::span<const int32_t> ids) {
  std::lock_guard lock(mu_);
  release_unclaimed();
  if (ids.size() > scratch_.size())
    fail("expert provider will_acquire: {} ids for MoE layer {}, which has {} experts (each id once)",
         ids.size(), moe_layer, scratch_.size());
  // A prefill chunk's union may exceed the cache: announce what fits; the rest is read when acquired, after
  // the model has released the first ones (it acquires in the announced order).
  const size_t n = std::min<size_t>(ids.size(), cache_.slots());
  cache_.acquire(moe_layer, ids.first(n), std::span<ExpertHandle>(scratch_.data(), n));
  for (size_t i = 0; i < n; ++i) {
    const ExpertHandle& h = scratch_[i];
    const int key = key_checked(moe_layer, h.expert, "will_acquire");
    if (announced_slot_[static_cast<size_t>(key)] >= 0) {
      cache_.release(h);  // announced twice: one pin is enough
      continue;
    }
    announced_slot_[static_cast<size_t>(key)] = h.slot;
    announced_keys_.push_back(key);
  }
}

experts::ExpertView StreamingExpertProvider::acquire(int moe_layer, int expert) {
  const int key = key_checked(moe_layer, expert, "acquire");
  ExpertHandle h;
  {
    std::lock_guard lock(mu_);
    int32_t& announced = announced_slot_[static_cast<size_t>(key)];
    if (announced >= 0) {
      h = ExpertHandle{announced, moe_layer, expert};
      announced = -1;
    } else {
      h = cache_.acquire(moe_layer, expert);
    }
    held_slot_[static_cast<size_t>(key)] = h.slot;
    ++held_count_[static_cast<size_t>(key)];
  }
  const uint8_t* record = cache_.wait(h);
  const store::MoeLayerLayout& l = cache_.source().layout.layers[static_cast<size_t>(moe_layer)];
  return experts::ExpertView{record + l.gate.offset,
                             record + l.up.offset,
                             record + l.down.offset,
                             l.gate.type,
                             l.up.type,
                             l.down.type,
                             l.gate.packing,
                             l.up.packing,
                             l.down.packing};
}

void StreamingExpertProvider::release(int moe_layer, int expert) {
  const int key = key_checked(moe_layer, expert, "release");
  std::lock_guard lock(mu_);
  int32_t& count = held_count_[static_cast<size_t>(key)];
  if (count <= 0) fail("expert provider release: MoE layer {} expert {} is not acquired", moe_layer, expert);
  --count;
  cache_.release(ExpertHandle{held_slot_[static_cast<size_t>(key)], moe_layer, expert});
}

void StreamingExpertProvider::abandon() {
  std::lock_guard lock(mu_);
  cache_.unpin_all();
  std::fill(announced_slot_.begin(), announced_slot_.end(), -1);
  std::fill(held_count_.begin(), held_count_.end(), 0);
  announced_keys_.clear();
}

}  // namespace df::stream

#include "models/sequence_state.h"

#include <algorithm>

#include "models/moe_model_base.h"
#include "util/error.h"

namespace df::models {

LayerStateSpec LayerStateSpec::kv(int n_head_kv, int head_dim, int window) {
  LayerStateSpec s;
  s.kind = Kind::kKv;
  s.n_head_kv = n_head_kv;
  s.head_dim = head_dim;
  s.window = window;
  return s;
}

LayerStateSpec LayerStateSpec::conv(int taps, int64_t channels) {
  LayerStateSpec s;
  s.kind = Kind::kConv;
  s.conv_taps = taps;
  s.conv_channels = channels;
  return s;
}

LayerStateSpec LayerStateSpec::delta_net(int taps, int64_t channels, int heads, int key_dim, int value_dim) {
  LayerStateSpec s = conv(taps, channels);
  s.kind = Kind::kDeltaNet;
  s.dn_heads = heads;
  s.dn_key_dim = key_dim;
  s.dn_value_dim = value_dim;
  return s;
}

namespace {

uint64_t kv_values(const LayerStateSpec& s, int n_ctx) {
  if (s.kind != LayerStateSpec::Kind::kKv) return 0;
  return static_cast<uint64_t>(std::max(n_ctx, 0)) * static_cast<uint64_t>(std::max(s.n_head_kv, 0)) *
         static_cast<uint64_t>(std::max(s.head_dim, 0));
}
uint64_t conv_values(const LayerStateSpec& s) {
  if (s.kind != LayerStateSpec::Kind::kConv && s.kind != LayerStateSpec::Kind::kDeltaNet) return 0;
  return static_cast<uint64_t>(std::max(s.conv_taps - 1, 0)) *
         static_cast<uint64_t>(std::max<int64_t>(s.conv_channels, 0));
}
uint64_t matrix_values(const LayerStateSpec& s) {
  if (s.kind != LayerStateSpec::Kind::kDeltaNet) return 0;
  return static_cast<uint64_t>(std::max(s.dn_heads, 0)) * static_cast<uint64_t>(std::max(s.dn_key_dim, 0)) *
         static_cast<uint64_t>(std::max(s.dn_value_dim, 0));
}

const char* kind_name(LayerStateSpec::Kind k) {
  switch (k) {
    case LayerStateSpec::Kind::kNone:
      return "no sequence state";
    case LayerStateSpec::Kind::kKv:
      return "a KV cache";
    case LayerStateSpec::Kind::kConv:
      return "a short-conv state";
    case LayerStateSpec::Kind::kDeltaNet:
      return "a delta-net state";
  }
  return "?";
}

}  // namespace

uint64_t LayerStateSpec::bytes(int n_ctx) const {
  // K and V in f16; conv rows and matrices in f32.
  return 2 * kv_values(*this, n_ctx) * sizeof(uint16_t) +
         (conv_values(*this) + matrix_values(*this)) * sizeof(float);
}

LayerStates::LayerStates(backend::Backend& be, std::vector<LayerStateSpec> specs, int n_ctx)
    : be_(&be), specs_(std::move(specs)), layers_(specs_.size()), n_ctx_(n_ctx) {
  for (size_t il = 0; il < specs_.size(); ++il) {
    const LayerStateSpec& s = specs_[il];
    Layer& l = layers_[il];
    l.k = be.alloc_array<uint16_t>(kv_values(s, n_ctx), "KV cache");
    l.v = be.alloc_array<uint16_t>(kv_values(s, n_ctx), "KV cache");
    l.conv = be.alloc_array<float>(conv_values(s), "short-conv state");
    l.matrix = be.alloc_array<float>(matrix_values(s), "delta-net state");
  }
}

const LayerStateSpec& LayerStates::checked(int il, LayerStateSpec::Kind a, LayerStateSpec::Kind b,
                                           const char* what) const {
  if (il < 0 || il >= n_layer()) fail("layer {} out of range ({} layers)", il, n_layer());
  const LayerStateSpec& s = specs_[static_cast<size_t>(il)];
  if (s.kind != a && s.kind != b) fail("layer {} holds {}, not {}", il, kind_name(s.kind), what);
  return s;
}

backend::KvCacheView LayerStates::kv(int il) {
  const LayerStateSpec& s = checked(il, LayerStateSpec::Kind::kKv, LayerStateSpec::Kind::kKv, "a KV cache");
  Layer& l = layers_[static_cast<size_t>(il)];
  return backend::KvCacheView{l.k.as<uint16_t>(), l.v.as<uint16_t>(), n_ctx_, s.n_head_kv, s.head_dim};
}

backend::Buf<float> LayerStates::conv(int il) {
  checked(il, LayerStateSpec::Kind::kConv, LayerStateSpec::Kind::kDeltaNet, "a conv state");
  return layers_[static_cast<size_t>(il)].conv.as<float>();
}

backend::Buf<float> LayerStates::matrix(int il) {
  checked(il, LayerStateSpec::Kind::kDeltaNet, LayerStateSpec::Kind::kDeltaNet, "a delta-net state");
  return layers_[static_cast<size_t>(il)].matrix.as<float>();
}

size_t LayerStates::bytes() const {
  size_t total = 0;
  for (const Layer& l : layers_) total += l.k.bytes() + l.v.bytes() + l.conv.bytes() + l.matrix.bytes();
  return total;
}

void LayerStates::reset() {
  for (Layer& l : layers_) {
    be_->fill_zero(l.conv.as<uint8_t>());
    be_->fill_zero(l.matrix.as<uint8_t>());
  }
}

// V is stored transposed (KvCacheView: a row of n_ctx positions per head dim), so its first n_pos positions
// are the start of every row, not the start of the buffer.
void LayerStates::copy_v_prefix(backend::DeviceBuffer& dst, const backend::DeviceBuffer& src,
                                const LayerStateSpec& s, int n_pos) {
  if (s.kind != LayerStateSpec::Kind::kKv || n_pos <= 0) return;
  if (n_pos >= n_ctx_) {
    be_->copy(dst.as<uint8_t>(), src.as<uint8_t>(), src.bytes());
    return;
  }
  const size_t row = static_cast<size_t>(n_ctx_) * sizeof(uint16_t),
               n = static_cast<size_t>(n_pos) * sizeof(uint16_t);
  const size_t rows = static_cast<size_t>(s.n_head_kv) * static_cast<size_t>(s.head_dim);
  for (size_t r = 0; r < rows; ++r)
    be_->copy(dst.as<uint8_t>().sub(r * row, n), src.as<uint8_t>().sub(r * row, n), n);
}

void LayerStates::copy_from(const LayerStates& other, int n_pos) {
  bool same = other.n_ctx_ == n_ctx_ && other.specs_.size() == specs_.size();
  for (size_t il = 0; same && il < specs_.size(); ++il) {
    const LayerStateSpec &a = specs_[il], &b = other.specs_[il];
    same = a.kind == b.kind && a.n_head_kv == b.n_head_kv && a.head_dim == b.head_dim &&
           a.conv_taps == b.conv_taps && a.conv_channels == b.conv_channels && a.dn_heads == b.dn_heads &&
           a.dn_key_dim == b.dn_key_dim && a.dn_value_dim == b.dn_value_dim;
  }
  if (!same)
    fail("cannot copy a state of context {} ({} layers) into one of context {} ({} layers)", other.n_ctx_,
         other.specs_.size(), n_ctx_, specs_.size());
  for (size_t il = 0; il < specs_.size(); ++il) {
    const Layer& o = other.layers_[il];
    Layer& l = layers_[il];
    const size_t n = static_cast<size_t>(kv_values(specs_[il], n_pos)) * sizeof(uint16_t);
    be_->copy(l.k.as<uint8_t>(), o.k.as<uint8_t>(), std::min(n, o.k.bytes()));
    copy_v_prefix(l.v, o.v, specs_[il], n_pos);
    be_->copy(l.conv.as<uint8_t>(), o.conv.as<uint8_t>(), o.conv.bytes());
    be_->copy(l.matrix.as<uint8_t>(), o.matrix.as<uint8_t>(), o.matrix.bytes());
  }
}

uint64_t LayerStates::bytes_for(const std::vector<LayerStateSpec>& specs, int n_ctx) {
  uint64_t total = 0;
  for (const auto& s : specs) total += s.bytes(n_ctx);
  return total;
}

void MoeSequenceState::copy_sequence_from(const ModelState& other) {
  const std::string& arch = owner_->info().arch;
  const auto* o = dynamic_cast<const MoeSequenceState*>(&other);
  if (!o || o->owner_ != owner_)
    fail("{}: copy_sequence_from() was given a state made by another model", arch);
  if (o->n_ctx_ != n_ctx_)
    fail("{}: cannot copy a state of context {} into one of context {}", arch, o->n_ctx_, n_ctx_);
  layers.copy_from(o->layers, o->n_past);
  n_past = o->n_past;
}

void TrunkBuffers::reserve(backend::Backend& be, size_t t, size_t H, size_t q_dim, size_t kv_dim,
                           size_t act_row_bytes) {
  pos_host.resize(t);
  tokens_host.resize(t);
  pos.resize(be, t, "positions");
  tokens.resize(be, t, "token ids");
  for (auto* b : {&x, &xn, &mix}) b->resize(be, t * H, "batch buffers");
  q.resize(be, t * q_dim, "batch buffers");
  att.resize(be, t * q_dim, "batch buffers");
  k.resize(be, t * kv_dim, "batch buffers");
  v.resize(be, t * kv_dim, "batch buffers");
  scratch.resize(be, t * act_row_bytes, "activation scratch");
}

size_t TrunkBuffers::bytes() const {
  size_t total = attn_scratch.bytes() + scratch.bytes() +
                 (pos_host.size() + tokens_host.size()) * sizeof(int32_t) + pos.bytes() + tokens.bytes();
  for (const auto* b : {&x, &xn, &mix, &q, &k, &v, &att}) total += b->bytes();
  return total;
}

size_t TrunkBuffers::bytes_for(size_t t, size_t H, size_t q_dim, size_t kv_dim, size_t act_row_bytes) {
  // pos and tokens (host and backend); x, xn, mix; q, att; k, v; scratch (attn_scratch is sized by the state,
  // not per batch)
  return t * (4 * sizeof(int32_t) + (3 * H + 2 * q_dim + 2 * kv_dim) * sizeof(float) + act_row_bytes);
}

namespace {

std::vector<LayerStateSpec> run_layers_only(const MoeModelBase& owner, std::vector<LayerStateSpec> specs) {
  for (size_t il = 0; il < specs.size(); ++il)
    if (!owner.runs_layer(static_cast<int>(il))) specs[il] = LayerStateSpec{};
  return specs;
}

}  // namespace

MoeSequenceState::MoeSequenceState(const MoeModelBase& owner, backend::Backend& backend, int n_ctx,
                                   std::vector<LayerStateSpec> specs, int attn_head_dim)
    : be(backend),
      layers(backend, run_layers_only(owner, std::move(specs)), n_ctx),
      owner_(&owner),
      n_ctx_(n_ctx) {
  if (attn_head_dim > 0)
    trunk.attn_scratch.resize(be, be.attention_scratch_floats(n_ctx, attn_head_dim), "attention scratch");
}

void MoeSequenceState::grow_batch(int64_t T, const BatchDims& d) {
  const size_t t = static_cast<size_t>(T);
  trunk.reserve(be, t, d.n_embd, d.q_dim, d.kv_dim, d.act_row_bytes);
  moe.reserve(be, t, d.n_embd, d.n_expert, d.k);
}

}  // namespace df::models

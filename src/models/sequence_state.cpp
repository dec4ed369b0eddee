#include "models/sequence_state.h"

#include <algorithm>

#include "util/error.h"

namespace df::models {

KvCache::KvCache(const std::vector<bool>& attn, int n_layer, int n_ctx, int n_head_kv, int head_dim)
    : n_ctx_(n_ctx), n_head_kv_(n_head_kv), head_dim_(head_dim) {
  const size_t kv_row = static_cast<size_t>(n_head_kv) * static_cast<size_t>(head_dim);
  k_.resize(static_cast<size_t>(n_layer));
  v_.resize(static_cast<size_t>(n_layer));
  for (size_t il = 0; il < static_cast<size_t>(n_layer); ++il) {
    if (!attn.empty() && !attn[il]) continue;
    k_[il].assign(kv_row * static_cast<size_t>(n_ctx), 0);
    v_[il].assign(kv_row * static_cast<size_t>(n_ctx), 0);
  }
}

backend::KvCacheView KvCache::view(int il) {
  return backend::KvCacheView{k_[static_cast<size_t>(il)].data(), v_[static_cast<size_t>(il)].data(), n_ctx_,
                              n_head_kv_, head_dim_};
}

void KvCache::copy_prefix(const KvCache& other, int n_pos) {
  const size_t n =
      static_cast<size_t>(n_pos) * static_cast<size_t>(n_head_kv_) * static_cast<size_t>(head_dim_);
  for (size_t il = 0; il < k_.size(); ++il) {
    std::copy_n(other.k_[il].begin(), std::min(n, other.k_[il].size()), k_[il].begin());
    std::copy_n(other.v_[il].begin(), std::min(n, other.v_[il].size()), v_[il].begin());
  }
}

void MoeSequenceState::copy_kv_from(const MoeSequenceState& other, const char* arch) {
  if (other.n_ctx_ != n_ctx_ || other.kv.bytes() != kv.bytes())
    fail("{}: cannot copy a state of context {} into one of context {}", arch, other.n_ctx_, n_ctx_);
  kv.copy_prefix(other.kv, other.n_past);
  n_past = other.n_past;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (size_t il = 0; il < k_.size(); ++il) total += (k_[il].size() + v_[il].size()) * sizeof(uint16_t);
  return total;
}

uint64_t KvCache::bytes_for(int n_kv_layers, int n_ctx, int n_head_kv, int head_dim) {
  // K and V, f16, n_ctx rows of n_head_kv * head_dim per attention layer
  return uint64_t{2} * sizeof(uint16_t) * static_cast<uint64_t>(std::max(n_kv_layers, 0)) *
         static_cast<uint64_t>(std::max(n_ctx, 0)) * static_cast<uint64_t>(std::max(n_head_kv, 0)) *
         static_cast<uint64_t>(std::max(head_dim, 0));
}

void TrunkBuffers::reserve(size_t t, size_t H, size_t q_dim, size_t kv_dim, size_t act_row_bytes) {
  pos.resize(t);
  for (auto* b : {&x, &xn, &mix}) b->resize(t * H);
  q.resize(t * q_dim);
  att.resize(t * q_dim);
  k.resize(t * kv_dim);
  v.resize(t * kv_dim);
  scratch.resize(t * act_row_bytes);
}

size_t TrunkBuffers::bytes() const {
  size_t total = attn_scratch.size() * sizeof(float) + scratch.size() + pos.size() * sizeof(int32_t);
  for (const auto* b : {&x, &xn, &mix, &q, &k, &v, &att}) total += b->size() * sizeof(float);
  return total;
}

size_t TrunkBuffers::bytes_for(size_t t, size_t H, size_t q_dim, size_t kv_dim, size_t act_row_bytes) {
  // pos; x, xn, mix; q, att; k, v; scratch (attn_scratch is sized by the state, not per batch)
  return t * (sizeof(int32_t) + (3 * H + 2 * q_dim + 2 * kv_dim) * sizeof(float) + act_row_bytes);
}

void MoeSequenceState::grow_batch(int64_t T, const BatchDims& d) {
  const size_t t = static_cast<size_t>(T);
  trunk.reserve(t, d.n_embd, d.q_dim, d.kv_dim, d.act_row_bytes);
  moe.reserve(t, d.n_embd, d.n_expert, d.k);
}

}  // namespace df::models

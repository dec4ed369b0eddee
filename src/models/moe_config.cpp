#include "models/moe_config.h"

#include <set>

#include "models/gguf_keys.h"
#include "models/weight_loader.h"
#include "util/error.h"

namespace df::models {

int uniform_per_layer(const gguf::File& f, const std::string& key, int n_layer) {
  const auto v = per_layer_ints(f, key, n_layer);
  if (std::set<int64_t>(v.begin(), v.end()).size() != 1 || v[0] <= 0 || v[0] > 65536)
    fail("{}: {} must be one positive value for every layer", f.path(), key);
  return static_cast<int>(v[0]);
}

AttentionHeads read_attention_heads(const gguf::File& f, const std::string& arch, int n_layer, int n_embd,
                                    int max_head_dim) {
  const auto key = [&](std::string_view k) { return keys::of(arch, k); };
  AttentionHeads h;
  h.n_head = uniform_per_layer(f, key(keys::head_count), n_layer);
  h.n_head_kv =
      f.has(key(keys::head_count_kv)) ? uniform_per_layer(f, key(keys::head_count_kv), n_layer) : h.n_head;
  if (h.n_head % h.n_head_kv != 0)
    fail("{}: {} query heads cannot be grouped over {} KV heads", f.path(), h.n_head, h.n_head_kv);
  // The head size is its own key (Qwen3-30B: 32 heads x 128 over a hidden size of 2048).
  if (!f.has(key(keys::key_length)) && n_embd % h.n_head != 0)
    fail(
        "{}: {}.attention.key_length is absent and the embedding length {} is not a multiple of the head "
        "count {}",
        f.path(), arch, n_embd, h.n_head);
  h.head_dim = static_cast<int>(f.get_int(key(keys::key_length)).value_or(n_embd / h.n_head));
  if (h.head_dim <= 0 || h.head_dim > max_head_dim || h.head_dim % 2 != 0)
    fail("{}: {}.attention.key_length {} must be even and in 2..{}", f.path(), arch, h.head_dim,
         max_head_dim);
  if (auto vl = f.get_int(key(keys::value_length)); vl && *vl != h.head_dim)
    fail("{}: {}.attention.value_length {} differs from key_length {}", f.path(), arch, *vl, h.head_dim);
  // The graph reshapes Q/K/V heads to n_rot values, so the head size must be the rotated width.
  if (auto rot = f.get_int(key(keys::rope_dimension_count)); rot && *rot != h.head_dim)
    fail("{}: {}.rope.dimension_count {} differs from the head size {} ({} rotates whole heads)", f.path(),
         arch, *rot, h.head_dim, arch);
  return h;
}

int vocab_from_token_embd(const gguf::File& f, const std::string& arch, int n_embd) {
  constexpr int64_t kBig = int64_t{1} << 24;
  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) fail("{}: {}: missing tensor 'token_embd.weight'", f.path(), arch);
  if (embd->n_dims != 2 || embd->ne[0] != n_embd)
    fail("{}: {}: tensor 'token_embd.weight' has shape {}, expected {{{}, n_vocab}}", f.path(), arch,
         embd->shape_string(), n_embd);
  if (embd->ne[1] < 1 || embd->ne[1] > kBig)
    fail("{}: {}: token_embd.weight has {} rows", f.path(), arch, embd->ne[1]);
  const int n_vocab = static_cast<int>(embd->ne[1]);
  if (const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
      toks && toks->is_array() && toks->arr.size() != static_cast<size_t>(n_vocab))
    fail("{}: tokenizer.ggml.tokens has {} entries but token_embd.weight has {} rows", f.path(),
         toks->arr.size(), n_vocab);
  return n_vocab;
}

}  // namespace df::models

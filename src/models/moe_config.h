#pragma once
// GGUF key reading the architectures' configs share, with the same checks and messages for each: head
// counts that are one value for every layer, the head size, and the vocabulary from token_embd's shape.
#include <string>

#include "gguf/gguf.h"

namespace df::models {

// One value for every layer (the key may be an array), positive.
int uniform_per_layer(const gguf::File& f, const std::string& key, int n_layer);

struct AttentionHeads {
  int n_head = 0, n_head_kv = 0, head_dim = 0;
};

// <arch>.attention.head_count / head_count_kv (one value for every layer; KV defaults to the query count),
// the head size from key_length (else n_embd / n_head), even and at most max_head_dim, equal to
// value_length and rope.dimension_count when present (the whole head is rotated).
AttentionHeads read_attention_heads(const gguf::File& f, const std::string& arch, int n_layer, int n_embd,
                                    int max_head_dim);

// The vocabulary size: token_embd's row count, its width checked against n_embd, and the tokenizer's
// list, when present, of the same length.
int vocab_from_token_embd(const gguf::File& f, const std::string& arch, int n_embd);

}  // namespace df::models

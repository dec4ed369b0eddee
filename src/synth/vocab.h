#pragma once
// A small but valid byte-level BPE vocabulary (tokenizer.ggml.model = gpt2) for synthetic models: the chat
// template's special tokens at the ids the real vocabulary family uses, the 256 byte tokens, then merges
// learned from a built-in text (so common words are single tokens), padded with deterministic filler merges
// up to the requested size. Every merge "A B" joins two earlier tokens into a token of the vocabulary.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "synth/config.h"

namespace df::synth {

// tokenizer.ggml.token_type values.
enum TokenType : int32_t { kTokenNormal = 1, kTokenControl = 3, kTokenUserDefined = 4 };

struct SpecialToken {
  std::string_view text;
  TokenType type;
};

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;
  std::string pre;  // tokenizer.ggml.pre
  uint32_t bos_id = 0, eos_id = 0, pad_id = 0;
  bool add_bos = false;
  bool has_add_eos = false;  // lfm2moe files carry add_eos_token = false, qwen3moe files do not
  std::string chat_template;
};

// The special tokens of the architecture's vocabulary, in id order (lfm2moe: ids 0.., qwen3moe: the last
// ids).
const std::vector<SpecialToken>& special_tokens(Arch arch);
// Smallest vocabulary make-model can build: the special tokens and the 256 byte tokens.
int min_vocab_size(Arch arch);

// Deterministic: the same (arch, n_vocab) always gives the same vocabulary.
Vocab build_vocab(Arch arch, int n_vocab);

// The Jinja chat template stored in tokenizer.chat_template (chat_template.cpp).
std::string chat_template(Arch arch);

// Building blocks, public for tests.
std::string byte_token_text(uint8_t b);  // GPT-2 byte map: the UTF-8 text of the token for byte b
// Splits text into pre-tokens with the Llama-3 / Qwen2 regex family (digit runs of up to max_digits),
// treating every non-ASCII code point as a letter: close enough to train merges on.
std::vector<std::string> pretokenize(std::string_view text, int max_digits);
std::vector<std::string_view> builtin_corpus();  // corpus.cpp

}  // namespace df::synth

#pragma once
// A small but valid byte-level BPE vocabulary (tokenizer.ggml.model = gpt2) for synthetic models: the chat
// template's special tokens at the ids the real vocabulary family uses, the 256 byte tokens, then merges
// learned from a built-in text (so common words are single tokens), padded with deterministic filler merges
// up to the requested size. Every merge "A B" joins two earlier tokens into a token of the vocabulary.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "synth/config.h"

namespace df::synth {

// tokenizer.ggml.token_type values.
enum TokenType : int32_t { kTokenNormal = 1, kTokenControl = 3, kTokenUserDefined = 4, kTokenByte = 6 };

struct SpecialToken {
  std::string_view text;
  TokenType type;
};

struct Vocab {
  std::string model = "gpt2";  // tokenizer.ggml.model
  std::vector<std::string> tokens;
  std::vector<float> scores;  // tokenizer.ggml.scores; empty: not written
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;
  std::string pre;  // tokenizer.ggml.pre; empty: not written (gemma4 files have none)
  uint32_t bos_id = 0, eos_id = 0, pad_id = 0;
  std::optional<uint32_t> unk_id;  // tokenizer.ggml.unknown_token_id, when written
  bool add_bos = false;
  bool has_add_eos = false;              // lfm2moe files carry add_eos_token = false, qwen3moe files do not
  std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix, when written
  std::string chat_template;
};

// The special tokens of the architecture's vocabulary, in id order (lfm2moe: ids 0.., qwen3moe and qwen35moe:
// the last ids).
const std::vector<SpecialToken>& special_tokens(Arch arch);
// Smallest vocabulary make-model can build: the special tokens and the 256 byte tokens.
int min_vocab_size(Arch arch);

// Deterministic: the same (arch, n_vocab) always gives the same vocabulary.
Vocab build_vocab(Arch arch, int n_vocab);

// The Jinja chat template stored in tokenizer.chat_template (chat_template.cpp).
std::string chat_template(Arch arch);

// Gemma 4 style (vocab_gemma4.cpp): tokenizer.ggml.model = gemma4, BPE over raw UTF-8 with spaces escaped to
// U+2581 and <0xXX> byte fallback (ARCHITECTURES.md 4.4, 9.5). The family's special tokens at the real ids
// (<pad> 0, <eos> 1, <bos> 2, <unk> 3, <|turn> 105, <turn|> 106, ...) with the token types llama.cpp's Gemma
// 4 converter gives them, newline-run tokens from id 107, the 256 byte tokens, the characters of the built-in
// corpus, then merges learned from it and filler merges up to n_vocab. Deterministic in n_vocab.
Vocab build_gemma4_vocab(int n_vocab);
int gemma4_min_vocab_size();
// The Gemma 4 style chat template of build_gemma4_vocab.
std::string gemma4_chat_template();

// Building blocks, public for tests.
std::string byte_token_text(uint8_t b);  // GPT-2 byte map: the UTF-8 text of the token for byte b
// Splits text into pre-tokens with the Llama-3 / Qwen2 regex family (digit runs of up to max_digits),
// treating every non-ASCII code point as a letter: close enough to train merges on.
std::vector<std::string> pretokenize(std::string_view text, int max_digits);
std::vector<std::string_view> builtin_corpus();  // corpus.cpp
// More text for qwen35moe only (corpus.cpp): words with combining marks (Devanagari, Thai, Bengali, Tamil,
// decomposed Latin accents), which the Qwen3.5 pre-tokenizer keeps whole.
std::string_view combining_marks_corpus();

}  // namespace df::synth

#pragma once
// Text <-> token ids for a GGUF vocabulary, with llama.cpp's semantics: encode = llama_tokenize,
// decode = llama_detokenize, token_to_piece = llama_token_to_piece (ARCHITECTURES.md 9.2, 9.4).
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace df::tok {

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);
  static Tokenizer from_gguf(const gguf::File& file);

  // add_special: prepend BOS / append EOS where the vocabulary adds them. parse_special: texts of control
  // tokens become those tokens (user-defined tokens are matched either way). Throws df::Error if `text` is
  // not well-formed UTF-8, naming the byte offset.
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;

  // remove_special: drop a leading BOS / trailing EOS where the vocabulary adds them. unparse_special: render
  // control tokens as their text (otherwise they render as nothing). The result is raw bytes and may end in
  // an incomplete UTF-8 sequence. Throws df::Error on an id outside the vocabulary.
  std::string decode(std::span<const TokenId> ids, bool remove_special = false,
                     bool unparse_special = false) const;

  // The bytes one token contributes (no space clean-up). `special`: render control tokens.
  std::string_view token_to_piece(TokenId id, bool special = true) const;

  std::optional<TokenId> token_id(std::string_view text) const { return vocab_.find(text); }
  const std::string& token_text(TokenId id) const { return vocab_.text(id); }
  bool is_eog(TokenId id) const { return vocab_.is_eog(id); }
  TokenId bos() const { return vocab_.bos(); }  // kNoToken if none
  TokenId eos() const { return vocab_.eos(); }
  bool add_bos() const { return vocab_.add_bos(); }
  bool add_eos() const { return vocab_.add_eos(); }
  size_t n_vocab() const { return vocab_.size(); }
  const Vocab& vocab() const { return vocab_; }

 private:
  Vocab vocab_;
  std::vector<std::string> pieces_;  // token_to_piece(id, special=true) of every token
};

}  // namespace df::tok

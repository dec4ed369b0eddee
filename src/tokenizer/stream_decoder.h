#pragma once
// Turns generated token ids into text as they arrive. A token may end inside a multi-byte UTF-8 character
// (byte-level BPE splits characters freely); those bytes are held back until the character is complete, so
// every returned chunk is whole characters. The chunks concatenate to the tokens' pieces (llama.cpp's
// token_to_piece), as a streaming front-end prints them: no space clean-up.
#include <string>

#include "tokenizer/tokenizer.h"

namespace df::tok {

class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder. `unparse_special`: render control tokens as their text.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool unparse_special = false)
      : tokenizer_(&tokenizer), unparse_special_(unparse_special) {}

  // The text completed by this token (possibly empty). Throws df::Error on an id outside the vocabulary.
  std::string push(TokenId id);
  // End of stream: whatever is still held back (a character whose remaining bytes never came), unchanged.
  std::string flush();
  // Bytes currently held back.
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool unparse_special_;
  std::string pending_;
};

}  // namespace df::tok

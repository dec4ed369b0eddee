#include "tokenizer/stream_decoder.h"

#include "tokenizer/unicode.h"

namespace df::tok {

std::string StreamDecoder::push(TokenId id) {
  pending_ += tokenizer_->token_to_piece(id, unparse_special_);
  // Only a tail that can still become a valid character is held; ill-formed bytes go out as they are, since
  // no later token can repair them.
  const size_t hold = utf8_incomplete_tail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return ready;
}

std::string StreamDecoder::flush() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace df::tok

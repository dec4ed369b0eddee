#pragma once
// Unicode helpers for the tokenizer: UTF-8 decoding (strict for user text, lenient for vocabulary text, as
// llama.cpp decodes it), character classes from ICU (pinned to llama.cpp's Unicode 15.1), and the GPT-2 byte
// <-> printable-character map.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/utf8.h"

namespace df::tok {

// Number of bytes a UTF-8 sequence announces by its lead byte, judged by the high nibble only (a
// continuation byte counts as 1). This is how llama.cpp cuts a BPE word into initial symbols.
size_t utf8_len_from_lead(uint8_t lead);

// Length of the longest prefix of `bytes` that is well-formed UTF-8 (no overlongs, no surrogates, nothing
// above U+10FFFF).
size_t utf8_valid_prefix(std::string_view bytes);

// Length of a trailing sequence that is well-formed so far but cut off by the end of `bytes` (a streaming
// decoder holds it back until the rest arrives); 0 if the text does not end that way.
size_t utf8_incomplete_tail(std::string_view bytes);

// Throws df::Error naming the byte offset (and `what`) of the first ill-formed sequence.
void require_valid_utf8(std::string_view bytes, std::string_view what);

// Decodes well-formed UTF-8 (check it first) into code points and their byte offsets;
// offsets.size() == cps.size() + 1, offsets.back() == bytes.size().
void decode_utf8(std::string_view bytes, std::vector<char32_t>& cps, std::vector<uint32_t>& offsets);

// llama.cpp's decoding of vocabulary text: an ill-formed byte becomes U+FFFD and decoding resumes at the
// next byte. Only continuation bits are checked (overlong forms decode to their value).
std::vector<char32_t> decode_utf8_lenient(std::string_view bytes);

// Character classes used by the pre-tokenizer regexes, as llama.cpp's tables (Unicode 15.1, unicode-data.cpp)
// give them: one general category per code point, and White_Space, which wins over the category the way
// llama.cpp's "collapsed" regex input lets it (every such character is a separator or a control anyway).
enum CharClass : uint16_t {
  kLetter = 1 << 0,       // \p{L}
  kNumber = 1 << 1,       // \p{N}
  kWhitespace = 1 << 2,   // \s: the Unicode White_Space property
  kAsciiUpper = 1 << 3,   // A-Z
  kAsciiLower = 1 << 4,   // a-z
  kCrLf = 1 << 5,         // \r or \n
  kPunctuation = 1 << 6,  // \p{P}
  kSymbol = 1 << 7,       // \p{S}
  kMark = 1 << 8,         // \p{M}
};
uint16_t char_class(char32_t cp);

// GPT-2 byte map: every byte has a printable stand-in character (ARCHITECTURES.md 9.2 step 4).
// Returns the UTF-8 encoding of the stand-in.
const std::string& byte_to_unicode(uint8_t byte);
// The byte a stand-in character stands for, or -1 if `cp` is not a stand-in.
int unicode_to_byte(char32_t cp);

}  // namespace df::tok

#pragma once
// UTF-8 encoding of one code point, shared by the tokenizer, the Jinja engine and the synthetic vocabularies.
#include <string>

namespace df {

// Appends cp in UTF-8 (1 to 4 bytes). The value is not checked: callers pass code points up to 0x10FFFF.
void append_utf8(std::string& out, char32_t cp);

}  // namespace df

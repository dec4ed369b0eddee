#pragma once
// Splits a template into text and tag tokens, applying Jinja's whitespace control the way llama.cpp
// configures it for chat templates (as transformers and @huggingface/jinja do): trim_blocks and lstrip_blocks
// on, a single trailing newline of the template dropped, "-" and "+" markers honoured.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace df::jinja {

// A template that cannot be parsed; pos is the byte offset in the normalized source.
class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(size_t pos, const std::string& what) : std::runtime_error(what), pos(pos) {}
  size_t pos;
};

enum class TokenKind : uint8_t {
  kText,        // literal output between tags
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the decoded value
  kInt,
  kFloat,
  kOperator,  // text holds the spelling: "+", "//", "(", "|", ...
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  size_t pos = 0;
  int64_t int_value = 0;
  double float_value = 0;
};

// CR LF and lone CR become LF (so positions and the output use one newline convention), and one trailing
// newline is dropped (Jinja's keep_trailing_newline=False).
std::string normalize_template_source(std::string_view source);

// Tokenizes a normalized source; the last token is kEof. Throws SyntaxError.
std::vector<Token> tokenize_template(std::string_view source);

// "line L, column C" (1-based, columns in bytes) of a byte offset.
std::string describe_position(std::string_view source, size_t pos);

}  // namespace df::jinja

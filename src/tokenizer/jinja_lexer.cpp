#include "tokenizer/jinja_lexer.h"

#include <charconv>
#include <string>

#include "tokenizer/jinja_strings.h"

namespace df::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Longest spellings first so that "**" wins over "*".
constexpr std::string_view kOperators[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                           "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                           "]",  "{",  "}",  ",",  ".",  ":",  "|"};

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag_start(pos_);
      emit_text(pos_, tag);
      if (tag == src_.size()) break;
      const char kind = src_[tag + 1];
      if (kind == '#') {
        lex_comment(tag);
      } else {
        lex_tag(tag, kind == '%');
      }
    }
    tokens_.push_back(Token{TokenKind::kEof, "", src_.size()});
    return std::move(tokens_);
  }

 private:
  // What the end of the previous tag asks of the text that follows it.
  enum class After { kNothing, kStripAll, kTrimNewline };

  size_t find_tag_start(size_t from) const {
    for (size_t p = from; p + 1 < src_.size(); ++p) {
      if (src_[p] == '{' && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return src_.size();
  }

  char at(size_t p) const { return p < src_.size() ? src_[p] : '\0'; }

  void emit_text(size_t begin, size_t end) {
    size_t a = begin;
    size_t b = end;
    if (after_ == After::kStripAll) {
      while (a < b && is_space(src_[a])) ++a;
    } else if (after_ == After::kTrimNewline && a < b && src_[a] == '\n') {
      ++a;
    }
    after_ = After::kNothing;
    if (end < src_.size()) {
      const char kind = src_[end + 1];
      const char mod = at(end + 2);
      if (mod == '-') {
        while (b > a && is_space(src_[b - 1])) --b;
      } else if ((kind == '%' || kind == '#') && mod != '+') {
        // lstrip_blocks: spaces and tabs between the start of a line and a block or comment tag go.
        size_t j = end;
        while (j > begin && (src_[j - 1] == ' ' || src_[j - 1] == '\t')) --j;
        if (j == 0 || src_[j - 1] == '\n') b = std::max(a, j);
      }
    }
    if (b > a) tokens_.push_back(Token{TokenKind::kText, std::string(src_.substr(a, b - a)), a});
  }

  void set_after_close(char marker, bool is_block) {
    if (marker == '-') {
      after_ = After::kStripAll;
    } else if (marker == '+') {
      after_ = After::kNothing;
    } else {
      after_ = is_block ? After::kTrimNewline : After::kNothing;
    }
  }

  void lex_comment(size_t tag) {
    const size_t close = src_.find("#}", tag + 2);
    if (close == std::string_view::npos) throw SyntaxError(tag, "unclosed comment: missing '#}'");
    const char marker = close > tag + 2 ? src_[close - 1] : '\0';
    set_after_close(marker == '-' || marker == '+' ? marker : '\0', true);
    pos_ = close + 2;
  }

  size_t skip_spaces(size_t p) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    return p;
  }

  // Matches "[-+]? ws* word ws* [-+]? %}" at p (just after "{%"); returns the end of the tag or npos.
  size_t match_simple_block(size_t p, std::string_view word, char* close_marker) const {
    if (at(p) == '-' || at(p) == '+') ++p;
    p = skip_spaces(p);
    if (src_.substr(p, word.size()) != word || is_name_char(at(p + word.size())))
      return std::string_view::npos;
    p = skip_spaces(p + word.size());
    *close_marker = '\0';
    if ((at(p) == '-' || at(p) == '+') && src_.substr(p + 1, 2) == "%}") {
      *close_marker = src_[p];
      ++p;
    }
    if (src_.substr(p, 2) != "%}") return std::string_view::npos;
    return p + 2;
  }

  bool try_raw_block(size_t tag) {
    char marker = '\0';
    const size_t body = match_simple_block(tag + 2, "raw", &marker);
    if (body == std::string_view::npos) return false;
    set_after_close(marker, true);
    for (size_t p = body; (p = src_.find("{%", p)) != std::string_view::npos; p += 2) {
      const size_t end = match_simple_block(p + 2, "endraw", &marker);
      if (end == std::string_view::npos) continue;
      emit_text(body, p);
      set_after_close(marker, true);
      pos_ = end;
      return true;
    }
    throw SyntaxError(tag, "unclosed raw block: missing '{% endraw %}'");
  }

  void lex_tag(size_t tag, bool is_block) {
    if (is_block && try_raw_block(tag)) return;
    size_t p = tag + 2;
    if (at(p) == '-' || (is_block && at(p) == '+')) ++p;
    tokens_.push_back(
        Token{is_block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, is_block ? "{%" : "{{", tag});
    const std::string_view closer = is_block ? "%}" : "}}";
    int depth = 0;
    while (true) {
      p = skip_spaces(p);
      if (p >= src_.size()) {
        throw SyntaxError(tag, std::string("unclosed tag: missing '") + std::string(closer) + "'");
      }
      if (depth == 0) {
        const char c = src_[p];
        if ((c == '-' || (is_block && c == '+')) && src_.substr(p + 1, 2) == closer) {
          push_end(is_block, p);
          set_after_close(c, is_block);
          pos_ = p + 3;
          return;
        }
        if (src_.substr(p, 2) == closer) {
          push_end(is_block, p);
          set_after_close('\0', is_block);
          pos_ = p + 2;
          return;
        }
      }
      p = lex_expression_token(p, &depth);
    }
  }

  void push_end(bool is_block, size_t p) {
    tokens_.push_back(Token{is_block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, is_block ? "%}" : "}}", p});
  }

  size_t lex_expression_token(size_t p, int* depth) {
    const char c = src_[p];
    if (is_name_start(c)) {
      size_t e = p;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      tokens_.push_back(Token{TokenKind::kName, std::string(src_.substr(p, e - p)), p});
      return e;
    }
    if (is_digit(c)) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    for (std::string_view op : kOperators) {
      if (src_.substr(p, op.size()) == op) {
        if (op == "(" || op == "[" || op == "{") ++*depth;
        if ((op == ")" || op == "]" || op == "}") && *depth > 0) --*depth;
        tokens_.push_back(Token{TokenKind::kOperator, std::string(op), p});
        return p + op.size();
      }
    }
    throw SyntaxError(p, std::string("unexpected character '") + c + "' in tag");
  }

  size_t lex_number(size_t p) {
    size_t e = p;
    bool is_float = false;
    auto digits = [&] {
      while (e < src_.size() && (is_digit(src_[e]) || src_[e] == '_')) ++e;
    };
    digits();
    if (at(e) == '.' && is_digit(at(e + 1))) {
      is_float = true;
      ++e;
      digits();
    }
    if ((at(e) == 'e' || at(e) == 'E') &&
        (is_digit(at(e + 1)) || ((at(e + 1) == '+' || at(e + 1) == '-') && is_digit(at(e + 2))))) {
      is_float = true;
      e += 2;
      digits();
    }
    std::string text;
    for (size_t i = p; i < e; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t{is_float ? TokenKind::kFloat : TokenKind::kInt, text, p};
    if (is_float) {
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), t.float_value);
      if (ec != std::errc() || ptr != text.data() + text.size())
        throw SyntaxError(p, "invalid number '" + text + "'");
    } else {
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), t.int_value);
      if (ec != std::errc() || ptr != text.data() + text.size()) {
        throw SyntaxError(p, "integer literal '" + text + "' is out of range");
      }
    }
    tokens_.push_back(std::move(t));
    return e;
  }

  size_t lex_string(size_t p) {
    const char quote = src_[p];
    std::string value;
    size_t e = p + 1;
    while (true) {
      if (e >= src_.size()) throw SyntaxError(p, "unterminated string literal");
      const char c = src_[e];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++e;
        continue;
      }
      e = decode_escape(e, &value);
    }
    tokens_.push_back(Token{TokenKind::kString, std::move(value), p});
    return e + 1;
  }

  // Python string-literal escapes; an unknown escape keeps its backslash, as Python does.
  size_t decode_escape(size_t e, std::string* out) {
    const char c = at(e + 1);
    auto hex = [&](size_t start, int count) -> size_t {
      uint32_t cp = 0;
      for (int i = 0; i < count; ++i) {
        const int d = hex_digit(at(start + static_cast<size_t>(i)));
        if (d < 0) throw SyntaxError(e, "truncated \\x, \\u or \\U escape in string literal");
        cp = cp * 16 + static_cast<uint32_t>(d);
      }
      if (cp > 0x10FFFF) throw SyntaxError(e, "escape names a code point above U+10FFFF");
      append_utf8(*out, static_cast<char32_t>(cp));
      return start + static_cast<size_t>(count);
    };
    switch (c) {
      case 'n':
        *out += '\n';
        return e + 2;
      case 't':
        *out += '\t';
        return e + 2;
      case 'r':
        *out += '\r';
        return e + 2;
      case 'b':
        *out += '\b';
        return e + 2;
      case 'f':
        *out += '\f';
        return e + 2;
      case 'v':
        *out += '\v';
        return e + 2;
      case 'a':
        *out += '\a';
        return e + 2;
      case '\\':
      case '\'':
      case '"':
        *out += c;
        return e + 2;
      case '\n':
        return e + 2;  // line continuation
      case 'x':
        return hex(e + 2, 2);
      case 'u':
        return hex(e + 2, 4);
      case 'U':
        return hex(e + 2, 8);
      case '\0':
        throw SyntaxError(e, "unterminated string literal");
      default:
        break;
    }
    if (c >= '0' && c <= '7') {
      uint32_t cp = 0;
      size_t i = e + 1;
      for (int n = 0; n < 3 && at(i) >= '0' && at(i) <= '7'; ++n, ++i)
        cp = cp * 8 + static_cast<uint32_t>(at(i) - '0');
      append_utf8(*out, static_cast<char32_t>(cp));
      return i;
    }
    *out += '\\';
    *out += c;
    return e + 2;
  }

  std::string_view src_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  After after_ = After::kNothing;
};

}  // namespace

std::string normalize_template_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize_template(std::string_view source) { return Lexer(source).run(); }

std::string describe_position(std::string_view source, size_t pos) {
  size_t line = 1;
  size_t column = 1;
  for (size_t i = 0; i < pos && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace df::jinja

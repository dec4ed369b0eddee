#include "tokenizer/tokenizer.h"

#include "gguf/gguf.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace df::tok {

namespace {

// Stand-in characters back to bytes. A character that stands for no byte is rendered the way llama.cpp
// renders it: "[UNK_BYTE_0x<its UTF-8 in hex><the whole token text>]".
std::string unmap_bytes(const std::string& text) {
  std::string out;
  for (const char32_t cp : decode_utf8_lenient(text)) {
    const int b = unicode_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
      continue;
    }
    std::string utf8;
    append_utf8(utf8, cp);
    out += "[UNK_BYTE_0x";
    for (const char c : utf8) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
    out += text;
    out += ']';
  }
  return out;
}

// A BYTE token's text is "<0xXX>"; llama.cpp reads the (at most) two characters after "<0x" with strtol in
// base 16 (leading white space, a sign and a "0x" prefix included) and keeps the low byte.
std::string byte_token_piece(const std::string& text) {
  const std::string_view digits = std::string_view(text).substr(3, 2);  // the vocabulary checked size >= 3
  size_t i = 0;
  while (i < digits.size() && (digits[i] == ' ' || (digits[i] >= '\t' && digits[i] <= '\r'))) ++i;
  bool negative = false;
  if (i < digits.size() && (digits[i] == '+' || digits[i] == '-')) negative = digits[i++] == '-';
  long value = 0;
  for (; i < digits.size(); ++i) {
    const char c = digits[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) break;  // also ends "0x": a prefix without digits after it reads as 0
    value = value * 16 + d;
  }
  return std::string(1, static_cast<char>(negative ? -value : value));
}

// SentencePiece-style text back to bytes: U+2581 stands for a space.
std::string unescape_whitespace(const std::string& text) {
  static constexpr std::string_view kEscapedSpace = "\xe2\x96\x81";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kEscapedSpace.size(), kEscapedSpace) == 0) {
      out.push_back(' ');
      i += kEscapedSpace.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

std::string piece_of(const Vocab& vocab, TokenId id) {
  const uint32_t attr = vocab.attr(id);
  const std::string& text = vocab.text(id);
  if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return text;
  if (attr & kAttrNormal) return vocab.escape_whitespaces() ? unescape_whitespace(text) : unmap_bytes(text);
  if (attr & kAttrByte) return byte_token_piece(text);
  return {};  // undefined and unused tokens render as nothing
}

// llama.cpp's escape before SentencePiece-style BPE: every space (U+0020 only) becomes U+2581.
void escape_whitespace(std::string_view text, std::string& out) {
  out.clear();
  for (const char c : text) {
    if (c == ' ')
      out += "\xe2\x96\x81";
    else
      out.push_back(c);
  }
}

// clean_up_tokenization_spaces as llama.cpp applies it to detokenized text (three passes, in this order).
std::string clean_spaces(std::string s) {
  const auto pass = [](const std::string& in, auto&& keep) {
    std::string out;
    out.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) keep(in, i, out);
    return out;
  };
  if (s.empty()) return s;
  // 1. " ?", " !", " .", " ,": drop the space.
  s = pass(s, [](const std::string& in, size_t i, std::string& out) {
    const char x = in[i];
    if (i > 0 && in[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out.pop_back();
    out.push_back(x);
  });
  // 2. " ' ": drop both spaces; the character after the second space is never treated as preceded by one.
  {
    std::string in = s, out;
    out.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const char x = in[i];
      if (i > 0 && x == '\'' && i + 1 < in.size() && in[i - 1] == ' ' && in[i + 1] == ' ') {
        out.pop_back();
        out.push_back(x);
        in[++i] = '\0';
        continue;
      }
      out.push_back(x);
    }
    s = std::move(out);
  }
  // 3. " 's", " 'm", " 're", " 've": drop the space (" 't", " 'd", " 'll" keep it).
  s = pass(s, [](const std::string& in, size_t i, std::string& out) {
    const char x = in[i];
    if (i > 0 && in[i - 1] == ' ' && x == '\'' && i + 1 < in.size()) {
      const char x1 = in[i + 1];
      if (x1 == 's' || x1 == 'm') {
        out.pop_back();
      } else if (x1 != 't' && x1 != 'd' && i + 2 < in.size()) {
        const char x2 = in[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) out.pop_back();
      }
    }
    out.push_back(x);
  });
  return s;
}

struct Fragment {
  TokenId token;  // kNoToken: raw text [offset, offset + length)
  size_t offset, length;
};

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  pieces_.reserve(vocab_.size());
  for (size_t id = 0; id < vocab_.size(); ++id) pieces_.push_back(piece_of(vocab_, static_cast<TokenId>(id)));
}

Tokenizer Tokenizer::from_gguf(const gguf::File& file) { return Tokenizer(Vocab::from_gguf(file)); }

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  require_valid_utf8(text, "the text to tokenize");
  std::vector<TokenId> out;
  if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos());

  // Cut the texts of special tokens out of the raw text, longest token first; each token splits every raw
  // fragment at all its non-overlapping occurrences, left to right.
  std::vector<Fragment> fragments, next;
  if (!text.empty()) fragments.push_back({kNoToken, 0, text.size()});
  for (const TokenId special : vocab_.special_tokens()) {
    if (!parse_special && (vocab_.attr(special) & (kAttrControl | kAttrUnknown))) continue;
    const std::string& needle = vocab_.text(special);
    if (text.find(needle) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      const std::string_view region = text.substr(0, f.offset + f.length);
      size_t pos = f.offset;
      for (size_t match; (match = region.find(needle, pos)) != std::string_view::npos;) {
        if (match > pos) next.push_back({kNoToken, pos, match - pos});
        next.push_back({special, match, needle.size()});
        pos = match + needle.size();
      }
      if (pos < f.offset + f.length) next.push_back({kNoToken, pos, f.offset + f.length - pos});
    }
    fragments.swap(next);
  }

  std::vector<std::string_view> words;
  PreTokenizeScratch pre_scratch;
  BpeScratch bpe_scratch;
  std::string escaped;
  for (const Fragment& f : fragments) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      continue;
    }
    std::string_view raw = text.substr(f.offset, f.length);
    if (vocab_.escape_whitespaces()) {
      escape_whitespace(raw, escaped);
      raw = escaped;
    }
    words.clear();
    pretokenize(vocab_.pre_tokenizer(), raw, words, pre_scratch);
    for (const std::string_view word : words) {
      vocab_.bpe().encode_piece(word, vocab_.text_to_id(), out, bpe_scratch);
    }
  }

  if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos());
  return out;
}

std::string_view Tokenizer::token_to_piece(TokenId id, bool special) const {
  const uint32_t attr = vocab_.attr(id);  // checks the range
  if (!special && (attr & (kAttrUnknown | kAttrControl))) return {};
  return pieces_[id];
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool remove_special, bool unparse_special) const {
  // With add_space_prefix the first piece loses one leading space, unless a removed BOS came before it.
  bool remove_space = vocab_.add_space_prefix();
  if (remove_special && vocab_.add_bos() && !ids.empty() && ids.front() == vocab_.bos()) {
    ids = ids.subspan(1);
    remove_space = false;
  }
  if (remove_special && vocab_.add_eos() && !ids.empty() && ids.back() == vocab_.eos()) {
    ids = ids.first(ids.size() - 1);
  }
  std::string text;
  for (const TokenId id : ids) {
    std::string_view piece = token_to_piece(id, unparse_special);
    if (remove_space && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    remove_space = false;
    text += piece;
  }
  if (vocab_.clean_spaces()) text = clean_spaces(std::move(text));
  return text;
}

}  // namespace df::tok

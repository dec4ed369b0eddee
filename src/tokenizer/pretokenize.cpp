#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace df::tok {

namespace {

// One split: cps/classes of a text, and a function per pattern returning the end of the match that starts at
// `i` (every pattern here matches at every position, so pieces are contiguous).
class Matcher {
 public:
  Matcher(const std::vector<char32_t>& cps, const std::vector<uint8_t>& classes)
      : cps_(cps), cls_(classes), n_(cps.size()) {}

  size_t llama3_like(size_t i, size_t max_digits) const {
    if (size_t len = contraction_at(i)) return i + len;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!has(i, kCrLf | kNumber) && (has(i, kLetter) || (i + 1 < n_ && has(i + 1, kLetter)))) {
      size_t j = i + 1;
      while (j < n_ && has(j, kLetter)) ++j;
      return j;
    }
    if (has(i, kNumber)) return digits(i, max_digits);
    if (size_t j = punctuation(i, /*slash_in_tail=*/false)) return j;
    return whitespace(i);
  }

  size_t gpt4o(size_t i) const {
    // The two letter alternatives. A leading non-letter/non-digit/non-CR/LF character is taken only when a
    // letter follows: without one neither alternative can match.
    size_t j = i;
    if (!has(i, kLetter | kNumber | kCrLf) && i + 1 < n_ && has(i + 1, kLetter)) j = i + 1;
    if (has(j, kLetter)) {
      size_t k = j;  // greedy "upper"* run
      while (k < n_ && upper(k)) ++k;
      // Backtrack the upper run to the last position where a "lower" can start.
      size_t lower_start = SIZE_MAX;
      if (k < n_ && lower(k)) {
        lower_start = k;
      } else {
        for (size_t t = k; t > j; --t) {
          if (lower(t - 1)) {
            lower_start = t - 1;
            break;
          }
        }
      }
      if (lower_start != SIZE_MAX) {  // first alternative: U* W+ C?
        size_t m = lower_start;
        while (m < n_ && lower(m)) ++m;
        return m + contraction_at(m);
      }
      return k + contraction_at(k);  // second alternative: U+ W* C? (W* is empty: cps_[k] is no letter)
    }
    if (has(i, kNumber)) return digits(i, 3);
    if (size_t e = punctuation(i, /*slash_in_tail=*/true)) return e;
    return whitespace(i);
  }

 private:
  bool has(size_t i, uint8_t mask) const { return (cls_[i] & mask) != 0; }
  bool upper(size_t i) const { return has(i, kLetter) && !has(i, kAsciiLower); }
  bool lower(size_t i) const { return has(i, kLetter) && !has(i, kAsciiUpper); }
  bool other(size_t i) const { return !has(i, kWhitespace | kLetter | kNumber); }

  static char32_t ascii_lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c; }

  // '[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD] at i: its length, or 0.
  size_t contraction_at(size_t i) const {
    if (i + 1 >= n_ || cps_[i] != '\'') return 0;
    const char32_t a = ascii_lower(cps_[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= n_) return 0;
    const char32_t b = ascii_lower(cps_[i + 2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }

  size_t digits(size_t i, size_t max_digits) const {
    size_t j = i;
    while (j < n_ && j - i < max_digits && has(j, kNumber)) ++j;
    return j;
  }

  // ` ?[^\s\p{L}\p{N}]+[\r\n]*` (with '/' in the tail class for GPT-4o): the match end, or 0 if none.
  size_t punctuation(size_t i, bool slash_in_tail) const {
    size_t j = i;
    if (cps_[i] == ' ' && i + 1 < n_ && other(i + 1)) j = i + 1;
    if (!other(j)) return 0;
    while (j < n_ && other(j)) ++j;
    while (j < n_ && (has(j, kCrLf) || (slash_in_tail && cps_[j] == '/'))) ++j;
    return j;
  }

  // \s*[\r\n]+ | \s+(?!\S) | \s+ at a whitespace character.
  size_t whitespace(size_t i) const {
    size_t k = i;
    size_t after_last_newline = 0;
    while (k < n_ && has(k, kWhitespace)) {
      if (has(k, kCrLf)) after_last_newline = k + 1;
      ++k;
    }
    if (after_last_newline != 0) return after_last_newline;
    if (k - i > 1 && k < n_) return k - 1;  // leave the last space to the word that follows
    if (k > i) return k;
    return i + 1;  // unreachable for the patterns here: every character matches some alternative
  }

  const std::vector<char32_t>& cps_;
  const std::vector<uint8_t>& cls_;
  size_t n_;
};

}  // namespace

void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces,
                 PreTokenizeScratch& scratch) {
  if (text.empty()) return;
  decode_utf8(text, scratch.cps, scratch.offsets);
  scratch.classes.resize(scratch.cps.size());
  for (size_t i = 0; i < scratch.cps.size(); ++i) scratch.classes[i] = char_class(scratch.cps[i]);

  const Matcher m(scratch.cps, scratch.classes);
  const size_t n = scratch.cps.size();
  for (size_t i = 0; i < n;) {
    size_t end = 0;
    switch (kind) {
      case PreTokenizer::kLlama3:
        end = m.llama3_like(i, 3);
        break;
      case PreTokenizer::kQwen2:
        end = m.llama3_like(i, 1);
        break;
      case PreTokenizer::kGpt4o:
        end = m.gpt4o(i);
        break;
    }
    const uint32_t b0 = scratch.offsets[i], b1 = scratch.offsets[end];
    pieces.push_back(text.substr(b0, b1 - b0));
    i = end;
  }
}

std::vector<std::string_view> pretokenize(PreTokenizer kind, std::string_view text) {
  std::vector<std::string_view> pieces;
  PreTokenizeScratch scratch;
  pretokenize(kind, text, pieces, scratch);
  return pieces;
}

}  // namespace df::tok

#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace df::tok {

namespace {

// hunyuan-dense's second regex: CJK Unified Ideographs up to U+9FA5, Hiragana and Katakana.
bool cjk_or_kana(char32_t cp) { return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF); }

// One split: cps/classes of a text, and a function per pattern returning the end of the match that starts at
// `i` (every single-regex pattern here matches at every position, so pieces are contiguous).
class Matcher {
 public:
  Matcher(const std::vector<char32_t>& cps, const std::vector<uint16_t>& classes)
      : cps_(cps), cls_(classes), n_(cps.size()) {}

  // The Llama-3 / Qwen2 family. `word` is what a word is made of: \p{L}, or for Qwen3.5 [\p{L}\p{M}] (the
  // punctuation class then leaves marks out too).
  size_t llama3_like(size_t i, size_t max_digits, uint16_t word = kLetter) const {
    if (size_t len = contraction_at(i)) return i + len;
    // [^\r\n\p{L}\p{N}]?\p{L}+, or [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ (a leading mark is part of the run then)
    if (!has(i, kCrLf | kNumber) && (has(i, word) || (i + 1 < n_ && has(i + 1, word)))) {
      size_t j = i + 1;
      while (j < n_ && has(j, word)) ++j;
      return j;
    }
    if (has(i, kNumber)) return digits(i, max_digits);
    if (size_t j = punctuation(i, /*slash_in_tail=*/false, kWhitespace | word | kNumber)) return j;
    return whitespace(i, n_);
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
    if (size_t e = punctuation(i, /*slash_in_tail=*/true, kWhitespace | kLetter | kNumber)) return e;
    return whitespace(i, n_);
  }

  // Calls emit(end) with the end of each piece in turn. The three regexes split in sequence, so each later
  // one works inside the pieces of the earlier ones, and its look-ahead ends where the piece ends.
  template <typename Emit>
  void hunyuan_dense(Emit&& emit) const {
    for (size_t i = 0; i < n_;) {
      // \p{N}{1,3}. The later regexes leave such a piece whole: it holds no letter, mark, punctuation,
      // symbol or whitespace for them to match.
      if (has(i, kNumber)) {
        i = digits(i, 3);
        emit(i);
        continue;
      }
      // Between digit runs, the CJK/kana runs and the text between them become pieces.
      const bool cjk = cjk_or_kana(cps_[i]);
      size_t end = i + 1;
      while (end < n_ && !has(end, kNumber) && cjk_or_kana(cps_[end]) == cjk) ++end;
      // The third regex: leftmost matches; unmatched text (before a match, or at the end) is a piece too.
      while (i < end) {
        size_t match_start = i, match_end = 0;
        while (match_start < end && (match_end = hunyuan_match(match_start, end)) == 0) ++match_start;
        if (match_start > i) emit(match_start);
        if (match_start == end) break;
        emit(match_end);
        i = match_end;
      }
      i = end;
    }
  }

 private:
  bool has(size_t i, uint16_t mask) const { return (cls_[i] & mask) != 0; }
  bool upper(size_t i) const { return has(i, kLetter) && !has(i, kAsciiLower); }
  bool lower(size_t i) const { return has(i, kLetter) && !has(i, kAsciiUpper); }

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

  // ` ?[^\s\p{L}\p{N}]+[\r\n]*` (with '/' in the tail class for GPT-4o; `not_other` is the negated class,
  // which for Qwen3.5 also holds \p{M}): the match end, or 0 if none.
  size_t punctuation(size_t i, bool slash_in_tail, uint16_t not_other) const {
    const auto other = [&](size_t k) { return !has(k, not_other); };
    size_t j = i;
    if (cps_[i] == ' ' && i + 1 < n_ && other(i + 1)) j = i + 1;
    if (!other(j)) return 0;
    while (j < n_ && other(j)) ++j;
    while (j < n_ && (has(j, kCrLf) || (slash_in_tail && cps_[j] == '/'))) ++j;
    return j;
  }

  // hunyuan-dense's third regex at i, in a piece that ends at `end`: the end of the match, or 0 if no
  // alternative matches there (a digit, or a control/format/unassigned character, with no letter or mark
  // right after it).
  size_t hunyuan_match(size_t i, size_t end) const {
    constexpr uint16_t kAsciiLetter = kAsciiUpper | kAsciiLower;
    // [!-/:-@[-`{-~][A-Za-z]+
    if (cps_[i] < 0x80 && has(i, kPunctuation | kSymbol) && i + 1 < end && has(i + 1, kAsciiLetter)) {
      size_t j = i + 1;
      while (j < end && has(j, kAsciiLetter)) ++j;
      return j;
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ (a mark may be the optional character too, which ends the match
    // in the same place).
    size_t j = i;
    if (!has(i, kCrLf | kLetter | kMark | kPunctuation | kSymbol) && i + 1 < end &&
        has(i + 1, kLetter | kMark))
      j = i + 1;
    if (has(j, kLetter | kMark)) {
      while (j < end && has(j, kLetter | kMark)) ++j;
      return j;
    }
    //  ?[\p{P}\p{S}]+[\r\n]*
    j = i;
    if (cps_[i] == ' ' && i + 1 < end && has(i + 1, kPunctuation | kSymbol)) j = i + 1;
    if (has(j, kPunctuation | kSymbol)) {
      while (j < end && has(j, kPunctuation | kSymbol)) ++j;
      while (j < end && has(j, kCrLf)) ++j;
      return j;
    }
    if (has(i, kWhitespace)) return whitespace(i, end);
    return 0;
  }

  // \s*[\r\n]+ | \s+(?!\S) | \s+ at a whitespace character, in a piece that ends at `end`.
  size_t whitespace(size_t i, size_t end) const {
    size_t k = i;
    size_t after_last_newline = 0;
    while (k < end && has(k, kWhitespace)) {
      if (has(k, kCrLf)) after_last_newline = k + 1;
      ++k;
    }
    if (after_last_newline != 0) return after_last_newline;
    if (k - i > 1 && k < end) return k - 1;  // leave the last space to the word that follows
    if (k > i) return k;
    return i + 1;  // unreachable for the patterns here: every character matches some alternative
  }

  const std::vector<char32_t>& cps_;
  const std::vector<uint16_t>& cls_;
  size_t n_;
};

}  // namespace

void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces,
                 PreTokenizeScratch& scratch) {
  if (text.empty()) return;
  if (kind == PreTokenizer::kNewlineRuns) {
    // Byte 0x0A only ever encodes U+000A in well-formed UTF-8, so runs can be cut on bytes.
    for (size_t start = 0; start < text.size();) {
      const bool newline = text[start] == '\n';
      size_t end = start + 1;
      while (end < text.size() && (text[end] == '\n') == newline) ++end;
      pieces.push_back(text.substr(start, end - start));
      start = end;
    }
    return;
  }
  decode_utf8(text, scratch.cps, scratch.offsets);
  scratch.classes.resize(scratch.cps.size());
  for (size_t i = 0; i < scratch.cps.size(); ++i) scratch.classes[i] = char_class(scratch.cps[i]);

  const Matcher m(scratch.cps, scratch.classes);
  size_t piece_start = 0;
  const auto emit = [&](size_t piece_end) {
    const uint32_t b0 = scratch.offsets[piece_start], b1 = scratch.offsets[piece_end];
    pieces.push_back(text.substr(b0, b1 - b0));
    piece_start = piece_end;
  };
  // A single pattern matches at every position, so each match ends one piece and starts the next.
  const auto each_match = [&](auto match_end) {
    for (size_t i = 0; i < scratch.cps.size();) {
      i = match_end(i);
      emit(i);
    }
  };
  switch (kind) {
    case PreTokenizer::kLlama3:
      each_match([&](size_t i) { return m.llama3_like(i, 3); });
      break;
    case PreTokenizer::kQwen2:
      each_match([&](size_t i) { return m.llama3_like(i, 1); });
      break;
    case PreTokenizer::kQwen35:
      each_match([&](size_t i) { return m.llama3_like(i, 1, kLetter | kMark); });
      break;
    case PreTokenizer::kGpt4o:
      each_match([&](size_t i) { return m.gpt4o(i); });
      break;
    case PreTokenizer::kHunyuanDense:
      m.hunyuan_dense(emit);
      break;
    case PreTokenizer::kNewlineRuns:
      break;  // handled above, without decoding
  }
}

std::vector<std::string_view> pretokenize(PreTokenizer kind, std::string_view text) {
  std::vector<std::string_view> pieces;
  PreTokenizeScratch scratch;
  pretokenize(kind, text, pieces, scratch);
  return pieces;
}

}  // namespace df::tok

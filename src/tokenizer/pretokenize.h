#pragma once
// Pre-tokenizers: split raw text into the pieces that BPE then encodes one by one (ARCHITECTURES.md 9.3).
// Each is a hand-written matcher over code points that returns exactly what llama.cpp's splitter returns for
// the same regex (leftmost match, alternatives in order, greedy quantifiers with backtracking).
#include <cstdint>
#include <string_view>
#include <vector>

namespace df::tok {

enum class PreTokenizer {
  // (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3 but \p{N} (one digit per piece).
  kQwen2,
  // Qwen3.5: as kQwen2, but combining marks continue a word and are no punctuation:
  // (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|
  //  ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen35,
  // The GPT-4o / o200k pattern in llama.cpp's spelling: "upper" = a letter that is not a-z, "lower" = a
  // letter
  // that is not A-Z (so a non-ASCII letter counts as both, and marks are not letters):
  // [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|
  // \s+(?!\S)|\s+   with C = the case-insensitive contractions.
  kGpt4o,
  // hunyuan-dense (also deepseek-v3, joyai-llm): three regexes, each splitting the pieces of the one before
  // (text between matches stays a piece of its own):
  //   \p{N}{1,3}
  //   [\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+
  //   [!-/:-@[-`{-~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|
  //   \s+(?!\S)|\s+
  // (the first bracket is the 32 ASCII punctuation and symbol characters).
  kHunyuanDense,
  // gemma4: [^\n]+|[\n]+ (maximal runs of newlines and of everything else). The text has its spaces escaped
  // to U+2581 by then (ARCHITECTURES.md 9.5).
  kNewlineRuns,
};

// Reusable buffers so that splitting a long text does not allocate per piece.
struct PreTokenizeScratch {
  std::vector<char32_t> cps;
  std::vector<uint32_t> offsets;
  std::vector<uint16_t> classes;
};

// Splits well-formed UTF-8 `text` (the caller checks it) into pieces, appended to `pieces` as views into
// `text`. The pieces are contiguous and cover the whole text.
void pretokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces,
                 PreTokenizeScratch& scratch);

// Convenience for tests.
std::vector<std::string_view> pretokenize(PreTokenizer kind, std::string_view text);

}  // namespace df::tok

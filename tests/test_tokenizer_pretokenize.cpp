// Pre-tokenizer splits on strings where the regex semantics are easy to get wrong: case-insensitive
// contractions, digit grouping, the "\s+(?!\S)" hand-over of the last space, CR/LF runs, non-ASCII
// whitespace, combining marks (not letters), and llama.cpp's spelling of the GPT-4o letter classes.
// Expected pieces were derived from the patterns by hand and agree with a backtracking regex engine.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/pretokenize.h"

namespace {

using df::tok::PreTokenizer;
using Pieces = std::vector<std::string>;

Pieces split(PreTokenizer kind, std::string_view text) {
  Pieces out;
  for (const auto piece : df::tok::pretokenize(kind, text)) out.emplace_back(piece);
  return out;
}

struct Case {
  std::string text;
  Pieces llama3, qwen2, gpt4o;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all{
      {"don't I'LL we've THEY'RE She'S",
       {"don", "'t", " I", "'LL", " we", "'ve", " THEY", "'RE", " She", "'S"},
       {"don", "'t", " I", "'LL", " we", "'ve", " THEY", "'RE", " She", "'S"},
       {"don't", " I'LL", " we've", " THEY'RE", " She'S"}},
      {"x'ss 'sup", {"x", "'s", "s", " '", "sup"}, {"x", "'s", "s", " '", "sup"}, {"x's", "s", " '", "sup"}},
      {"1234567 89",
       {"123", "456", "7", " ", "89"},
       {"1", "2", "3", "4", "5", "6", "7", " ", "8", "9"},
       {"123", "456", "7", " ", "89"}},
      {"a  b   c", {"a", " ", " b", "  ", " c"}, {"a", " ", " b", "  ", " c"}, {"a", " ", " b", "  ", " c"}},
      {"trail   ", {"trail", "   "}, {"trail", "   "}, {"trail", "   "}},
      {"   lead", {"  ", " lead"}, {"  ", " lead"}, {"  ", " lead"}},
      {"line\n\nnext\r\n  \n end",
       {"line", "\n\n", "next", "\r\n  \n", " end"},
       {"line", "\n\n", "next", "\r\n  \n", " end"},
       {"line", "\n\n", "next", "\r\n  \n", " end"}},
      {"  \n\n  x", {"  \n\n", " ", " x"}, {"  \n\n", " ", " x"}, {"  \n\n", " ", " x"}},
      {"\t\tx", {"\t", "\tx"}, {"\t", "\tx"}, {"\t", "\tx"}},
      // NBSP and U+2028 are whitespace; U+0301 (combining acute) is neither letter nor whitespace.
      {"a\u00a0b", {"a", "\u00a0b"}, {"a", "\u00a0b"}, {"a", "\u00a0b"}},
      {"a\u2028b", {"a", "\u2028b"}, {"a", "\u2028b"}, {"a", "\u2028b"}},
      {"e\u0301 \u0301", {"e", "\u0301", " \u0301"}, {"e", "\u0301", " \u0301"}, {"e", "\u0301", " \u0301"}},
      // GPT-4o: a word breaks before an ASCII capital that follows lower case; a non-ASCII letter is both
      // "upper" and "lower" in llama.cpp's spelling, so \u00c6 ends a word when ASCII capitals follow it.
      {"HelloWorld HELLOworld helloWORLD",
       {"HelloWorld", " HELLOworld", " helloWORLD"},
       {"HelloWorld", " HELLOworld", " helloWORLD"},
       {"Hello", "World", " HELLOworld", " hello", "WORLD"}},
      {"\u00c6RS \u00c6R\u00d8 \u00e9T\u00c9",
       {"\u00c6RS", " \u00c6R\u00d8", " \u00e9T\u00c9"},
       {"\u00c6RS", " \u00c6R\u00d8", " \u00e9T\u00c9"},
       {"\u00c6", "RS", " \u00c6R\u00d8", " \u00e9T\u00c9"}},
      {"https://example.com/a/b//",
       {"https", "://", "example", ".com", "/a", "/b", "//"},
       {"https", "://", "example", ".com", "/a", "/b", "//"},
       {"https", "://", "example", ".com", "/a", "/b", "//"}},
      // GPT-4o lets '/' trail punctuation after a newline.
      {"end.\n/x", {"end", ".\n", "/x"}, {"end", ".\n", "/x"}, {"end", ".\n/", "x"}},
      {"Price: $4.50!!!\n\n",
       {"Price", ":", " $", "4", ".", "50", "!!!\n\n"},
       {"Price", ":", " $", "4", ".", "5", "0", "!!!\n\n"},
       {"Price", ":", " $", "4", ".", "50", "!!!\n\n"}},
      {"日本語テキスト 한국어",
       {"日本語テキスト", " 한국어"},
       {"日本語テキスト", " 한국어"},
       {"日本語テキスト", " 한국어"}},
      {"🙂 🚀x", {"🙂", " 🚀", "x"}, {"🙂", " 🚀", "x"}, {"🙂", " 🚀", "x"}},
      {"½ ⅓ ²", {"½", " ", "⅓", " ", "²"}, {"½", " ", "⅓", " ", "²"}, {"½", " ", "⅓", " ", "²"}},
      {"ab'\u00e9", {"ab", "'\u00e9"}, {"ab", "'\u00e9"}, {"ab", "'\u00e9"}},
      {" ", {" "}, {" "}, {" "}},
      {"?\n", {"?\n"}, {"?\n"}, {"?\n"}},
  };
  return all;
}

TEST(PreTokenize, Llama3) {
  for (const Case& c : cases()) EXPECT_EQ(split(PreTokenizer::kLlama3, c.text), c.llama3) << c.text;
}

TEST(PreTokenize, Qwen2) {
  for (const Case& c : cases()) EXPECT_EQ(split(PreTokenizer::kQwen2, c.text), c.qwen2) << c.text;
}

TEST(PreTokenize, Gpt4o) {
  for (const Case& c : cases()) EXPECT_EQ(split(PreTokenizer::kGpt4o, c.text), c.gpt4o) << c.text;
}

TEST(PreTokenize, EmptyTextHasNoPieces) {
  EXPECT_TRUE(split(PreTokenizer::kLlama3, "").empty());
  EXPECT_TRUE(split(PreTokenizer::kGpt4o, "").empty());
}

TEST(PreTokenize, PiecesCoverTheTextInOrder) {
  std::string text;
  for (const Case& c : cases()) text += c.text;
  for (const auto kind : {PreTokenizer::kLlama3, PreTokenizer::kQwen2, PreTokenizer::kGpt4o}) {
    std::string joined;
    for (const auto& piece : split(kind, text)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    EXPECT_EQ(joined, text);
  }
}

}  // namespace

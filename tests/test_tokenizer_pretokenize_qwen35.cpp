// The qwen35 pre-tokenizer (Qwen3.5 / 3.6, ARCHITECTURES.md 9.3): as qwen2, but combining marks (\p{M})
// continue a word and are no punctuation. Checked against llama.cpp itself:
// tests/data/pretokenize/qwen35.json holds the pieces that llama.cpp's unicode_regex_split gives (its
// hand-written qwen35 and qwen2 splitters) for a few hundred texts, with the qwen2 split wherever it differs
// (see "source" and "texts" there).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "counting_operator_new.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using df::tok::PreTokenizer;
using json = nlohmann::json;
using Pieces = std::vector<std::string>;

json load_data(const std::string& name) {
  const auto path = std::filesystem::path(__FILE__).parent_path() / "data/pretokenize" / name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return json::parse(in);
}

Pieces split(PreTokenizer kind, std::string_view text) {
  Pieces out;
  for (const auto piece : df::tok::pretokenize(kind, text)) out.emplace_back(piece);
  return out;
}

std::string quoted(const Pieces& pieces) {
  std::string out;
  for (const auto& p : pieces) out += json(p).dump() + " ";
  return out;
}

TEST(PreTokenizeQwen35, EveryStoredTextSplitsAsInLlamaCpp) {
  const json data = load_data("qwen35.json");
  ASSERT_GE(data["cases"].size(), 400u);
  for (const json& c : data["cases"]) {
    const std::string text = c["text"];
    const auto expected = c["pieces"].get<Pieces>();
    const Pieces got = split(PreTokenizer::kQwen35, text);
    EXPECT_EQ(got, expected) << "text " << json(text).dump() << "\n  llama.cpp: " << quoted(expected)
                             << "\n  ours:      " << quoted(got);
  }
}

// The same texts through qwen2, which llama.cpp splits differently wherever a mark is involved.
TEST(PreTokenizeQwen35, Qwen2SplitsTheStoredTextsAsInLlamaCppToo) {
  const json data = load_data("qwen35.json");
  size_t differing = 0;
  for (const json& c : data["cases"]) {
    const std::string text = c["text"];
    const bool differs = c.contains("qwen2_pieces");
    differing += differs;
    const auto expected = c[differs ? "qwen2_pieces" : "pieces"].get<Pieces>();
    const Pieces got = split(PreTokenizer::kQwen2, text);
    EXPECT_EQ(got, expected) << "text " << json(text).dump() << "\n  llama.cpp: " << quoted(expected)
                             << "\n  ours:      " << quoted(got);
  }
  EXPECT_GE(differing, 100u);
}

struct Case {
  std::string text;
  Pieces qwen35, qwen2;
};

// Where the two splits part, spelled out (the pieces are llama.cpp's, as in qwen35.json).
TEST(PreTokenizeQwen35, MarksContinueAWordAndLeaveThePunctuationClass) {
  const std::vector<Case> cases{
      // Devanagari: viramas and vowel signs are marks, so qwen2 cuts the word at each of them.
      {"नमस्ते दुनिया", {"नमस्ते", " दुनिया"}, {"नमस", "्त", "े", " द", "ुन", "िय", "ा"}},
      // A decomposed é (e + U+0301).
      {"cafe\u0301 au", {"cafe\u0301", " au"}, {"cafe", "\u0301", " au"}},
      // Thai vowel and tone marks.
      {"สวัสดี ครับ", {"สวัสดี", " ครับ"}, {"สว", "ัสด", "ี", " คร", "ับ"}},
      // Digits one at a time in both, other scripts' digits too; a mark after a digit is a word of its own.
      {"1234 \u0967\u0968 3\u0301",
       {"1", "2", "3", "4", " ", "\u0967", "\u0968", " ", "3", "\u0301"},
       {"1", "2", "3", "4", " ", "\u0967", "\u0968", " ", "3", "\u0301"}},
      // Contractions (ASCII case-insensitive) are matched before words; a mark no longer joins the
      // apostrophe.
      {"don't I'LL e\u0301'S",
       {"don", "'t", " I", "'LL", " e\u0301", "'S"},
       {"don", "'t", " I", "'LL", " e", "\u0301'", "S"}},
      // Whitespace runs hand their last character to a following word, which may start with a mark.
      {"a  b   \u0301c\t\t\u0301\n\n \u0301",
       {"a", " ", " b", "  ", " \u0301c", "\t", "\t\u0301", "\n\n", " \u0301"},
       {"a", " ", " b", "  ", " \u0301", "c", "\t", "\t", "\u0301\n\n", " \u0301"}},
      {"x \u0301y  \u0301", {"x", " \u0301y", " ", " \u0301"}, {"x", " \u0301", "y", " ", " \u0301"}},
      // Punctuation followed by marks: a punctuation character before a mark is the optional first character
      // of a word, and a punctuation run stops at a mark.
      {"!\u0301 !!\u0301a ?\u0308? (\u0301)",
       {"!\u0301", " !!", "\u0301a", " ?", "\u0308", "?", " (", "\u0301", ")"},
       {"!\u0301", " !!\u0301", "a", " ?\u0308?", " (\u0301)"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(split(PreTokenizer::kQwen35, c.text), c.qwen35) << json(c.text).dump();
    EXPECT_EQ(split(PreTokenizer::kQwen2, c.text), c.qwen2) << json(c.text).dump();
  }
}

TEST(PreTokenizeQwen35, EmptyTextHasNoPiecesAndPiecesCoverTheText) {
  EXPECT_TRUE(split(PreTokenizer::kQwen35, "").empty());
  const json data = load_data("qwen35.json");
  std::string text;
  for (const json& c : data["cases"]) text += c["text"].get<std::string>();
  std::string joined;
  for (const auto& piece : split(PreTokenizer::kQwen35, text)) {
    EXPECT_FALSE(piece.empty());
    joined += piece;
  }
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizeQwen35, SplittingAllocatesNothingOnceTheBuffersHaveGrown) {
  const std::string text = "नमस्ते दुनिया, cafe\u0301 1234 don't !\u0301 สวัสดี \u00a0 \r\n\n  end";
  df::tok::PreTokenizeScratch scratch;
  std::vector<std::string_view> pieces;
  df::tok::pretokenize(PreTokenizer::kQwen35, text, pieces, scratch);
  const size_t n_pieces = pieces.size();
  pieces.clear();
  const uint64_t before = g_allocations.load();
  df::tok::pretokenize(PreTokenizer::kQwen35, text, pieces, scratch);
  EXPECT_EQ(g_allocations.load(), before);
  EXPECT_EQ(pieces.size(), n_pieces);
}

// llama.cpp maps only "qwen35" to this split, with clean_spaces off, no ignore_merges and no BOS by default.
TEST(PreTokenizeQwen35, TheVocabularyNameSelectsItWithLlamaCppFlags) {
  df::tok::VocabSpec spec;
  spec.pre = "qwen35";
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(df::tok::byte_to_unicode(static_cast<uint8_t>(b)));
  // e + U+0301 (UTF-8 CC 81): token 256 = the two byte tokens of U+0301 merged, 257 = "e" + 256.
  const std::string acute = df::tok::byte_to_unicode(0xCC) + df::tok::byte_to_unicode(0x81);
  spec.tokens.push_back(acute);
  spec.tokens.push_back("e" + acute);
  spec.merges = {df::tok::byte_to_unicode(0xCC) + " " + df::tok::byte_to_unicode(0x81), "e " + acute};
  const auto vocab = df::tok::Vocab::build(spec);
  EXPECT_EQ(vocab.pre_tokenizer(), PreTokenizer::kQwen35);
  EXPECT_FALSE(vocab.ignore_merges());
  EXPECT_FALSE(vocab.add_bos());
  EXPECT_FALSE(vocab.clean_spaces());
  // The mark stays in the word's piece, so the merge across it applies; qwen2 puts it in a piece of its own.
  const df::tok::Tokenizer tok(df::tok::Vocab::build(spec));
  EXPECT_EQ(tok.encode("e\u0301", false, false), std::vector<df::tok::TokenId>{257});
  spec.pre = "qwen2";
  const df::tok::Tokenizer qwen2(df::tok::Vocab::build(spec));
  EXPECT_EQ(qwen2.encode("e\u0301", false, false), (std::vector<df::tok::TokenId>{'e', 256}));
}

}  // namespace

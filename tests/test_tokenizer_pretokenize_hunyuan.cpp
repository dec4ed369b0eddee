// The hunyuan-dense pre-tokenizer (also deepseek-v3, joyai-llm) against llama.cpp itself:
// tests/data/pretokenize holds the pieces that llama.cpp's unicode_regex_split gives for a few hundred texts
// (written by a program built from llama.cpp's src/unicode.cpp, see "source" there), and llama.cpp's
// character categories for every code point, which the regexes' \p{..} classes depend on.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "counting_operator_new.h"
#include "golden_json.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using df::tok::PreTokenizer;
using json = nlohmann::json;

json load_data(const std::string& name) {
  const auto path = std::filesystem::path(__FILE__).parent_path() / "data/pretokenize" / name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return json::parse(in);
}

std::string quoted(const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += json(p).dump() + " ";
  return out;
}

TEST(PreTokenizeHunyuanDense, EveryStoredTextSplitsAsInLlamaCpp) {
  const json data = load_data("hunyuan_dense.json");
  ASSERT_GE(data["cases"].size(), 200u);
  for (const json& c : data["cases"]) {
    const std::string text = c["text"];
    const auto expected = c["pieces"].get<std::vector<std::string>>();
    std::vector<std::string> got;
    for (const auto piece : df::tok::pretokenize(PreTokenizer::kHunyuanDense, text)) got.emplace_back(piece);
    EXPECT_EQ(got, expected) << "text " << json(text).dump() << "\n  llama.cpp: " << quoted(expected)
                             << "\n  ours:      " << quoted(got);
  }
}

TEST(PreTokenizeHunyuanDense, StoredTextsIncludeTheGoldenTokenizerCases) {
  const json data = load_data("hunyuan_dense.json");
  std::set<std::string> stored;
  for (const json& c : data["cases"]) stored.insert(c["text"].get<std::string>());
  const json golden = df::testing::golden_json("lfm2moe-tiny");
  ASSERT_EQ(golden["tokenizer"]["cases"].size(), 27u);
  for (const json& c : golden["tokenizer"]["cases"]) {
    EXPECT_TRUE(stored.count(c["text"].get<std::string>())) << c["text"].dump();
  }
}

TEST(PreTokenizeHunyuanDense, SplittingAllocatesNothingOnceTheBuffersHaveGrown) {
  const std::string text =
      "Hello, world! 日本語のテキスト 1234567 .Hello @user \u00a0 e\u0301 \U0001F469\u200d\U0001F469 "
      "\u0661\u0662\u0663\r\n\n  end";
  df::tok::PreTokenizeScratch scratch;
  std::vector<std::string_view> pieces;
  df::tok::pretokenize(PreTokenizer::kHunyuanDense, text, pieces, scratch);
  const size_t n_pieces = pieces.size();
  pieces.clear();
  const uint64_t before = g_allocations.load();
  df::tok::pretokenize(PreTokenizer::kHunyuanDense, text, pieces, scratch);
  EXPECT_EQ(g_allocations.load(), before);
  EXPECT_EQ(pieces.size(), n_pieces);
}

// \p{L}, \p{N}, \p{P}, \p{S}, \p{M} and \s as llama.cpp's tables give them, for all of Unicode; whitespace
// counts as nothing else (llama.cpp's regex input replaces it with a plain whitespace byte).
TEST(PreTokenizeHunyuanDense, CharacterClassesAgreeWithLlamaCppForEveryCodePoint) {
  using namespace df::tok;
  const json data = load_data("llama_cpp_unicode_classes.json");
  const auto bits_of = [](const std::string& category) -> uint16_t {
    if (category == "L") return kLetter;
    if (category == "N") return kNumber;
    if (category == "P") return kPunctuation;
    if (category == "S") return kSymbol;
    if (category == "M") return kMark;
    return 0;  // Z, C, Cn: none of the classes the regexes name
  };
  std::vector<uint16_t> expected(0x110000, 0);
  const json& ranges = data["ranges"];
  for (size_t r = 0; r < ranges.size(); ++r) {
    const uint32_t first = ranges[r][0];
    const uint32_t end = r + 1 < ranges.size() ? ranges[r + 1][0].get<uint32_t>() : 0x110000u;
    for (uint32_t cp = first; cp < end; ++cp) expected[cp] = bits_of(ranges[r][1]);
  }
  for (const json& cp : data["whitespace"]) expected[cp.get<uint32_t>()] = kWhitespace;

  constexpr uint16_t kCompared = kLetter | kNumber | kPunctuation | kSymbol | kMark | kWhitespace;
  size_t mismatches = 0;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    const uint16_t ours = char_class(cp) & kCompared;
    if (ours != expected[cp] && ++mismatches <= 20) {
      ADD_FAILURE() << fmt::format("U+{:04X}: ours {:#x}, llama.cpp {:#x}", cp, ours, expected[cp]);
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

// The names llama.cpp maps to these regexes, with the flags it sets for them: no ignore_merges, no BOS by
// default, clean_spaces off.
TEST(PreTokenizeHunyuanDense, VocabularyNamesSelectItWithLlamaCppFlags) {
  for (const std::string name : {"hunyuan-dense", "deepseek-v3", "joyai-llm"}) {
    df::tok::VocabSpec spec;
    spec.pre = name;
    for (int b = 0; b < 256; ++b) spec.tokens.push_back(df::tok::byte_to_unicode(static_cast<uint8_t>(b)));
    spec.tokens.push_back(".H");
    spec.merges = {". H"};
    const auto vocab = df::tok::Vocab::build(spec);
    EXPECT_EQ(vocab.pre_tokenizer(), PreTokenizer::kHunyuanDense) << name;
    EXPECT_FALSE(vocab.ignore_merges()) << name;
    EXPECT_FALSE(vocab.add_bos()) << name;
    EXPECT_FALSE(vocab.clean_spaces()) << name;
    // ".H" is one piece here (ASCII punctuation joins the ASCII letters after it), so the merge applies;
    // " .H" puts the space and '.' in one piece and 'H' in the next.
    const df::tok::Tokenizer tok(df::tok::Vocab::build(spec));
    EXPECT_EQ(tok.encode(".H", false, false), std::vector<df::tok::TokenId>{256}) << name;
    EXPECT_EQ(tok.encode(" .H", false, false), (std::vector<df::tok::TokenId>{' ', '.', 'H'})) << name;
  }
}

}  // namespace

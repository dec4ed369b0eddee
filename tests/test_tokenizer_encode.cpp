// Encoding and decoding rules on small hand-built vocabularies, where each rule can be seen in isolation:
// merge order, ignore_merges, llama.cpp's byte fallback, special-token matching (control vs user-defined,
// longest first), BOS/EOS, invalid UTF-8, detokenization of special tokens, space clean-up, and the
// end-of-generation set.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace {

using df::tok::TokenId;
using df::tok::Tokenizer;
using df::tok::TokenType;
using df::tok::Vocab;
using df::tok::VocabSpec;

// The 256 byte stand-ins (ids 0-255, so a byte's id is its value), then `extra` tokens.
VocabSpec byte_vocab(const std::string& pre, std::vector<std::pair<std::string, TokenType>> extra = {},
                     std::vector<std::string> merges = {"a b"}) {
  VocabSpec spec;
  spec.pre = pre;
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(df::tok::byte_to_unicode(static_cast<uint8_t>(b)));
    spec.token_types.push_back(static_cast<int32_t>(TokenType::kNormal));
  }
  for (auto& [text, type] : extra) {
    spec.tokens.push_back(text);
    spec.token_types.push_back(static_cast<int32_t>(type));
  }
  spec.merges = std::move(merges);
  return spec;
}

Tokenizer make(VocabSpec spec) { return Tokenizer(Vocab::build(std::move(spec))); }

TokenId id_of(const Tokenizer& t, const std::string& text) {
  const auto id = t.token_id(text);
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(-1);
}

std::vector<TokenId> bytes_of(std::string_view s) {
  std::vector<TokenId> out;
  for (const char c : s) out.push_back(static_cast<uint8_t>(c));
  return out;
}

TEST(Encode, MergesApplyLowestRankFirst) {
  const auto t = make(byte_vocab(
      "qwen2", {{"ab", TokenType::kNormal}, {"bc", TokenType::kNormal}, {"abc", TokenType::kNormal}},
      {"b c", "a b", "a bc"}));
  EXPECT_EQ(t.encode("abc", false, false), std::vector<TokenId>{id_of(t, "abc")});  // b+c first, then a+bc
  const auto u = make(byte_vocab(
      "qwen2", {{"ab", TokenType::kNormal}, {"bc", TokenType::kNormal}, {"abc", TokenType::kNormal}},
      {"a b", "b c", "a bc"}));
  EXPECT_EQ(u.encode("abc", false, false),
            (std::vector<TokenId>{id_of(u, "ab"), 'c'}));  // "ab c" is no merge
}

TEST(Encode, EqualRanksMergeLeftmostFirst) {
  const auto t = make(byte_vocab("qwen2", {{"aa", TokenType::kNormal}}, {"a a"}));
  EXPECT_EQ(t.encode("aaa", false, false), (std::vector<TokenId>{id_of(t, "aa"), 'a'}));
  EXPECT_EQ(t.encode("aaaa", false, false), (std::vector<TokenId>{id_of(t, "aa"), id_of(t, "aa")}));
}

TEST(Encode, SpaceIsMappedToItsStandIn) {
  const auto t = make(byte_vocab("qwen2",
                                 {{"\xc4\xa0"
                                   "a",
                                   TokenType::kNormal}},
                                 {"\xc4\xa0 a"}));  // "Ġa"
  EXPECT_EQ(t.encode(" a", false, false), std::vector<TokenId>{256});
  EXPECT_EQ(t.encode("\n", false, false), std::vector<TokenId>{'\n'});
}

TEST(Encode, IgnoreMergesEmitsAWholeWordThatIsAToken) {
  // "xyz" is a token that no merge can build: llama3-type vocabularies emit it whole, qwen2 does not.
  const auto llama3 = make(byte_vocab("lfm2", {{"xyz", TokenType::kNormal}}));
  EXPECT_EQ(llama3.encode("xyz", false, false), std::vector<TokenId>{id_of(llama3, "xyz")});
  const auto qwen2 = make(byte_vocab("qwen2", {{"xyz", TokenType::kNormal}}));
  EXPECT_EQ(qwen2.encode("xyz", false, false), bytes_of("xyz"));
}

TEST(Encode, MergeResultOutsideTheVocabularyFallsBackToSingleByteTokens) {
  // "a b" merges into "ab", which is no token: llama.cpp then looks up each byte of the piece's text.
  const auto t = make(byte_vocab("qwen2", {}, {"a b"}));
  EXPECT_EQ(t.encode("ab", false, false), bytes_of("ab"));
  // For a non-ASCII piece those bytes are halves of stand-in characters, which are no tokens: dropped.
  const auto u = make(byte_vocab("qwen2", {}, {"\xc3\x83 \xc2\xa9"}));  // the stand-ins of C3 A9 ("é")
  EXPECT_TRUE(u.encode("\xc3\xa9", false, false).empty());
}

TEST(Encode, UserDefinedTokensAreAlwaysMatchedControlOnlyWhenParsingSpecials) {
  const auto t =
      make(byte_vocab("qwen2", {{"<|c|>", TokenType::kControl}, {"<u>", TokenType::kUserDefined}}));
  const TokenId c = id_of(t, "<|c|>"), u = id_of(t, "<u>");
  EXPECT_EQ(t.encode("x<u>y", false, false), (std::vector<TokenId>{'x', u, 'y'}));
  auto plain = bytes_of("<|c|>");
  EXPECT_EQ(t.encode("<|c|>", false, false), plain);
  EXPECT_EQ(t.encode("<|c|><u><|c|>", false, true), (std::vector<TokenId>{c, u, c}));
  plain = bytes_of("<|c|");
  EXPECT_EQ(t.encode("<|c|", false, true), plain);
}

TEST(Encode, LongerSpecialTokensAreCutOutFirst) {
  // "bcd" is longer than "ab", so it is cut out first even though "ab" starts earlier.
  const auto t =
      make(byte_vocab("qwen2", {{"ab", TokenType::kUserDefined}, {"bcd", TokenType::kUserDefined}}));
  EXPECT_EQ(t.encode("abcd", false, false), (std::vector<TokenId>{'a', id_of(t, "bcd")}));
  const auto u = make(byte_vocab("qwen2", {{"<a>", TokenType::kControl}, {"<a><b>", TokenType::kControl}}));
  EXPECT_EQ(u.encode("<a><b><a>", false, true), (std::vector<TokenId>{id_of(u, "<a><b>"), id_of(u, "<a>")}));
}

TEST(Encode, BosAndEosFollowTheVocabularyFlags) {
  auto spec = byte_vocab("lfm2", {{"<s>", TokenType::kControl}, {"</s>", TokenType::kControl}});
  spec.bos = 256;
  spec.eos = 257;
  const auto t = make(spec);  // lfm2 adds BOS by default
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_EQ(t.encode("a", true, false), (std::vector<TokenId>{256, 'a'}));
  EXPECT_EQ(t.encode("a", false, false), (std::vector<TokenId>{'a'}));
  EXPECT_EQ(t.encode("", true, false), (std::vector<TokenId>{256}));
  spec.add_bos = false;
  spec.add_eos = true;
  const auto u = make(spec);
  EXPECT_EQ(u.encode("a", true, false), (std::vector<TokenId>{'a', 257}));
}

TEST(Encode, InvalidUtf8IsRejectedWithItsByteOffset) {
  const auto t = make(byte_vocab("qwen2"));
  const auto message = [&](std::string_view text) {
    try {
      t.encode(text, false, false);
    } catch (const df::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("ab\xc3").find("byte offset 2"), std::string::npos) << message("ab\xc3");
  EXPECT_NE(message("ab\xc3").find("truncated"), std::string::npos);
  EXPECT_NE(message("a\x80").find("byte offset 1"), std::string::npos);
  EXPECT_NE(message("\xc0\xaf").find("byte offset 0"), std::string::npos);          // overlong '/'
  EXPECT_NE(message("xy\xed\xa0\x80").find("byte offset 2"), std::string::npos);    // surrogate
  EXPECT_NE(message("\xf4\x90\x80\x80").find("byte offset 0"), std::string::npos);  // above U+10FFFF
  EXPECT_NE(message("\xe2\x82z").find("byte offset 0"), std::string::npos);
  EXPECT_EQ(message("\xf0\x9f\x99\x82 \xe2\x82\xac"), "no error");
}

TEST(Decode, ControlTokensShowOnlyWhenUnparsingUserDefinedAlways) {
  auto spec = byte_vocab("qwen2", {{"<|c|>", TokenType::kControl}, {"<u>", TokenType::kUserDefined}});
  const auto t = make(spec);
  const std::vector<TokenId> ids{id_of(t, "<|c|>"), 'h', 'i', id_of(t, "<u>")};
  EXPECT_EQ(t.decode(ids, false, false), "hi<u>");
  EXPECT_EQ(t.decode(ids, false, true), "<|c|>hi<u>");
  EXPECT_EQ(t.token_to_piece(id_of(t, "<|c|>"), false), "");
  EXPECT_EQ(t.token_to_piece(id_of(t, "<|c|>"), true), "<|c|>");
}

TEST(Decode, OutOfRangeIdIsAnError) {
  const auto t = make(byte_vocab("qwen2"));
  const std::vector<TokenId> ids{'a', 256};
  EXPECT_THROW(t.decode(ids), df::Error);
  EXPECT_THROW(t.token_to_piece(-1), df::Error);
}

TEST(Decode, RemoveSpecialDropsOnlyTheBosAndEosTheVocabularyAdds) {
  auto spec = byte_vocab("lfm2", {{"<s>", TokenType::kControl}, {"</s>", TokenType::kControl}});
  spec.bos = 256;
  spec.eos = 257;
  const auto t = make(spec);  // adds BOS, not EOS
  const std::vector<TokenId> ids{256, 'a', 257};
  EXPECT_EQ(t.decode(ids, true, true), "a</s>");
  EXPECT_EQ(t.decode(ids, false, true), "<s>a</s>");
}

TEST(Decode, PartialUtf8IsReturnedAsRawBytes) {
  const auto t = make(byte_vocab("qwen2"));
  const std::vector<TokenId> ids{0xF0, 0x9F};
  EXPECT_EQ(t.decode(ids), "\xf0\x9f");
}

TEST(Decode, CleanSpacesAppliesToLlama3TypeVocabulariesOnly) {
  const std::string text = "x ? y ' z 's 't 're";
  const auto llama3 = make(byte_vocab("lfm2"));
  EXPECT_EQ(llama3.decode(llama3.encode(text, false, false)), "x? y'z's 't're");
  const auto qwen2 = make(byte_vocab("qwen2"));
  EXPECT_EQ(qwen2.decode(qwen2.encode(text, false, false)), text);
}

TEST(Decode, CharacterThatStandsForNoByteIsMarked) {
  const auto t =
      make(byte_vocab("qwen2", {{"q\xe2\x82\xac", TokenType::kNormal}}));  // "q€": € is no stand-in
  EXPECT_EQ(t.token_to_piece(256), "q[UNK_BYTE_0xe282acq\xe2\x82\xac]");
}

TEST(EndOfGeneration, TextsEosAndHarmonyRule) {
  auto spec = byte_vocab("gpt-4o", {{"<|endoftext|>", TokenType::kControl},
                                    {"<|return|>", TokenType::kControl},
                                    {"<|call|>", TokenType::kControl},
                                    {"<|end|>", TokenType::kControl},
                                    {"<|start|>", TokenType::kControl},
                                    {"<|im_end|>", TokenType::kNormal},
                                    {"<|other|>", TokenType::kControl}});
  spec.eos = 257;
  const auto t = make(spec);
  for (const char* eog : {"<|endoftext|>", "<|return|>", "<|call|>", "<|im_end|>"})
    EXPECT_TRUE(t.is_eog(id_of(t, eog))) << eog;
  for (const char* not_eog : {"<|end|>", "<|start|>", "<|other|>", "a"})
    EXPECT_FALSE(t.is_eog(id_of(t, not_eog))) << not_eog;
  // <|end|> and <|start|> became user-defined (matched without parse_special); <|im_end|> became control.
  EXPECT_EQ(t.encode("<|end|><|start|><|im_end|>", false, false).size(), 2u + 10u);
  EXPECT_EQ(t.decode(t.encode("<|im_end|>", false, true)), "");

  spec.tokens.erase(spec.tokens.begin() + 258);  // without <|call|>, <|end|> stays an end of generation
  spec.token_types.erase(spec.token_types.begin() + 258);
  const auto u = make(spec);
  EXPECT_TRUE(u.is_eog(id_of(u, "<|end|>")));
  EXPECT_EQ(u.encode("<|end|>", false, false).size(), 7u);
}

}  // namespace

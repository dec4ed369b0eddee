// StreamDecoder: text comes out only in whole UTF-8 characters, however the tokens split them, and the
// chunks add up to the tokens' pieces.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/unicode.h"

namespace {

using df::tok::StreamDecoder;
using df::tok::TokenId;
using df::tok::Tokenizer;

// One token per byte: ids 0-255 are the byte stand-ins, 256 a control token.
Tokenizer byte_tokenizer() {
  df::tok::VocabSpec spec;
  spec.pre = "qwen2";
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(df::tok::byte_to_unicode(static_cast<uint8_t>(b)));
  spec.tokens.push_back("<|im_end|>");
  spec.merges = {"a b"};
  return Tokenizer(df::tok::Vocab::build(spec));
}

std::vector<std::string> feed(StreamDecoder& d, std::string_view bytes) {
  std::vector<std::string> out;
  for (const char c : bytes) out.push_back(d.push(static_cast<uint8_t>(c)));
  return out;
}

TEST(StreamDecoder, HoldsSplitCharactersUntilComplete) {
  const auto tok = byte_tokenizer();
  StreamDecoder d(tok);
  EXPECT_EQ(feed(d, "a\xc3\xa9"), (std::vector<std::string>{"a", "", "\xc3\xa9"}));
  EXPECT_EQ(feed(d, "\xf0\x9f\x99\x82!"), (std::vector<std::string>{"", "", "", "\xf0\x9f\x99\x82", "!"}));
  EXPECT_EQ(d.pending(), 0u);
  EXPECT_EQ(feed(d, "\xe6\x97"), (std::vector<std::string>{"", ""}));
  EXPECT_EQ(d.pending(), 2u);
  EXPECT_EQ(d.flush(), "\xe6\x97");  // the stream ended inside a character: the bytes come out unchanged
  EXPECT_EQ(d.pending(), 0u);
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, IllFormedBytesAreNotHeldBack) {
  const auto tok = byte_tokenizer();
  StreamDecoder d(tok);
  EXPECT_EQ(feed(d, "\x80"), (std::vector<std::string>{"\x80"}));  // stray continuation byte
  EXPECT_EQ(feed(d, "\xe2\x82z"), (std::vector<std::string>{"", "", "\xe2\x82z"}));  // broken by 'z'
  EXPECT_EQ(feed(d, "\xc0"), (std::vector<std::string>{"\xc0"}));  // can never start a character
}

TEST(StreamDecoder, ControlTokensFollowUnparseSpecial) {
  const auto tok = byte_tokenizer();
  StreamDecoder hidden(tok), shown(tok, true);
  EXPECT_EQ(hidden.push(256), "");
  EXPECT_EQ(shown.push(256), "<|im_end|>");
}

// Every golden text through the gpt-oss vocabulary (no space clean-up, so the stream must equal the text).
TEST(StreamDecoder, GoldenTextsStreamInWholeCharacters) {
  const std::string dir = DF_GOLDEN_DIR;
  const auto tok = Tokenizer::from_gguf(df::gguf::File::open(dir + "/gpt-oss-tiny.gguf"));
  std::ifstream in(dir + "/gpt-oss-tiny.json");
  const auto golden = nlohmann::json::parse(in);
  int split_characters = 0;
  for (const auto& c : golden["tokenizer"]["cases"]) {
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE(c["name"].get<std::string>());
    StreamDecoder d(tok);
    std::string streamed;
    for (const TokenId id : tok.encode(text, false, false)) {
      const std::string chunk = d.push(id);
      EXPECT_EQ(df::tok::utf8_valid_prefix(chunk), chunk.size());
      if (d.pending() > 0) ++split_characters;
      streamed += chunk;
    }
    EXPECT_EQ(d.flush(), "");
    EXPECT_EQ(streamed, text);
  }
  EXPECT_GT(split_characters, 10);  // the small vocabulary splits most non-ASCII characters
}

TEST(StreamDecoder, GoldenPartialUtf8TokenIsHeld) {
  const std::string dir = DF_GOLDEN_DIR;
  const auto tok = Tokenizer::from_gguf(df::gguf::File::open(dir + "/gpt-oss-tiny.gguf"));
  StreamDecoder d(tok);
  EXPECT_EQ(d.push(434), "");  // the golden partial_utf8 case: this token is F0 9F
  EXPECT_EQ(d.flush(), "\xf0\x9f");
}

}  // namespace

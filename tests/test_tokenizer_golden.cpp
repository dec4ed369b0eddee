// The tokenizer against what llama.cpp produced for the golden models (shared/golden/*.json, "tokenizer"
// block): every text with parse_special off and on, every detokenization byte for byte, the BOS/EOS flags,
// the chat prompts (rendered text -> ids) and the generation prompts.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "golden_json.h"
#include "tokenizer/tokenizer.h"

namespace {

using df::tok::TokenId;
using df::tok::Tokenizer;
using json = nlohmann::json;

using df::testing::golden_path;

json load_json(const std::string& model) {
  std::ifstream in(golden_path(model + ".json"));
  if (!in) throw std::runtime_error("cannot open " + golden_path(model + ".json"));
  return json::parse(in);
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

class GoldenTokenizer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = load_json(GetParam());
    const auto file = df::gguf::File::open(golden_path(GetParam() + ".gguf"));
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(file));
  }
  json golden_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(GoldenTokenizer, SpecialFlagsAndIds) {
  const json& t = golden_["tokenizer"];
  EXPECT_EQ(tok_->add_bos(), t["add_bos"].get<bool>());
  EXPECT_EQ(tok_->add_eos(), t["add_eos"].get<bool>());
  EXPECT_EQ(tok_->bos(), t["bos_id"].get<TokenId>());
  EXPECT_EQ(tok_->eos(), t["eos_id"].get<TokenId>());
  EXPECT_EQ(tok_->n_vocab(), golden_["model"]["n_vocab"].get<size_t>());
  for (const auto& [text, id] : golden_["model"]["special_ids"].items()) {
    EXPECT_EQ(tok_->token_id(text), std::optional<TokenId>(id.get<TokenId>())) << text;
    EXPECT_EQ(tok_->token_text(id.get<TokenId>()), text);
  }
}

TEST_P(GoldenTokenizer, EncodeCases) {
  const json& cases = golden_["tokenizer"]["cases"];
  ASSERT_GE(cases.size(), 27u);
  int with_specials = 0;
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE(c["name"].get<std::string>());
    EXPECT_EQ(tok_->encode(text, false, false), c["ids"].get<std::vector<TokenId>>())
        << "parse_special=false";
    if (c.contains("ids_parse_special")) {
      ++with_specials;
      EXPECT_EQ(tok_->encode(text, false, true), c["ids_parse_special"].get<std::vector<TokenId>>())
          << "parse_special=true";
    }
  }
  EXPECT_EQ(with_specials, 5);
}

TEST_P(GoldenTokenizer, DetokenizeCases) {
  const json& cases = golden_["tokenizer"]["detokenize"];
  ASSERT_FALSE(cases.empty());
  for (const json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto ids = c["ids"].get<std::vector<TokenId>>();
    const std::string got =
        tok_->decode(ids, c["remove_special"].get<bool>(), c["unparse_special"].get<bool>());
    EXPECT_EQ(to_hex(got), c["text_hex"].get<std::string>());
    EXPECT_EQ(got, from_hex(c["text_hex"].get<std::string>()));
  }
}

TEST_P(GoldenTokenizer, ChatPromptsTokenizeAsLlamaServer) {
  for (const json& c : golden_["chat"]["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto prompt = c["prompt"].get<std::string>();
    EXPECT_EQ(tok_->encode(prompt, tok_->add_bos(), true), c["prompt_ids"].get<std::vector<TokenId>>());
  }
}

TEST_P(GoldenTokenizer, GenerationPromptsArePrefixesOfTheTokenizedText) {
  for (const json& g : golden_["generation"]) {
    const std::string name = g["name"].get<std::string>();
    const json& p = golden_["prompts"][name];
    if (!p.contains("text")) continue;  // chat-rendered prompt
    SCOPED_TRACE(name);
    const auto want = g["prompt_ids"].get<std::vector<TokenId>>();
    auto got = tok_->encode(p["text"].get<std::string>(), tok_->add_bos(), false);
    ASSERT_GE(got.size(), want.size());
    got.resize(want.size());
    EXPECT_EQ(got, want);
  }
}

TEST_P(GoldenTokenizer, EncodeThenDecodeRoundTripsEveryCase) {
  for (const json& c : golden_["tokenizer"]["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(tok_->decode(tok_->encode(text, false, true), false, true).size() > 0, !text.empty());
    if (!tok_->vocab().clean_spaces()) {
      EXPECT_EQ(tok_->decode(tok_->encode(text, false, true), false, true), text);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTokenizer,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-medium", "lfm2moe-tiny-f16",
                                           "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny",
                                           "qwen35moe-tiny"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace

// The synthetic Gemma 4 vocabulary: the builder still makes exactly the vocabularies whose llama.cpp
// tokenizations tests/data/tokenizer/gemma4_cases.json holds (test_tokenizer_gemma4 checks ours against
// them), the family's special tokens sit at their ids with the converter's token types, every merge is well
// formed, and write_vocab writes the keys llama.cpp's Gemma 4 converter writes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "error_matchers.h"
#include "gguf/gguf.h"
#include "synth/vocab.h"
#include "synth/writer.h"

namespace {

using df::synth::build_gemma4_vocab;
using json = nlohmann::json;

const json& fixture() {
  static const json j = [] {
    std::ifstream in(std::filesystem::path(__FILE__).parent_path() / "data/tokenizer/gemma4_cases.json");
    if (!in) throw std::runtime_error("cannot open tests/data/tokenizer/gemma4_cases.json");
    return json::parse(in);
  }();
  return j;
}

TEST(SynthGemma4Vocab, BuildsTheVocabulariesOfTheTokenizerFixture) {
  // If this fails after a deliberate change to the builder, regenerate gemma4_cases.json with llama.cpp.
  const json& vocabs = fixture()["vocabs"];
  ASSERT_EQ(vocabs.size(), 2u);
  for (const json& f : vocabs) {
    const int n = f["n_vocab"].get<int>();
    SCOPED_TRACE(n);
    const auto v = build_gemma4_vocab(n);
    EXPECT_EQ(v.tokens, f["tokens"].get<std::vector<std::string>>());
    EXPECT_EQ(v.token_types, f["token_types"].get<std::vector<int32_t>>());
    EXPECT_EQ(v.merges, f["merges"].get<std::vector<std::string>>());
  }
  EXPECT_EQ(df::synth::gemma4_chat_template(), fixture()["chat_template"].get<std::string>());
}

TEST(SynthGemma4Vocab, SpecialTokensSitAtTheFamilyIdsWithTheConverterTypes) {
  const auto v = build_gemma4_vocab(2048);
  ASSERT_EQ(v.tokens.size(), 2048u);
  const std::map<int, std::pair<std::string, int32_t>> expected = {
      {0, {"<pad>", df::synth::kTokenControl}},
      {1, {"<eos>", df::synth::kTokenControl}},
      {2, {"<bos>", df::synth::kTokenControl}},
      {3, {"<unk>", df::synth::kTokenControl}},
      {46, {"<|tool>", df::synth::kTokenControl}},
      {47, {"<tool|>", df::synth::kTokenControl}},
      {48, {"<|tool_call>", df::synth::kTokenUserDefined}},
      {49, {"<tool_call|>", df::synth::kTokenUserDefined}},
      {50, {"<|tool_response>", df::synth::kTokenUserDefined}},
      {51, {"<tool_response|>", df::synth::kTokenUserDefined}},
      {52, {"<|\"|>", df::synth::kTokenUserDefined}},
      {98, {"<|think|>", df::synth::kTokenControl}},
      {100, {"<|channel>", df::synth::kTokenUserDefined}},
      {101, {"<channel|>", df::synth::kTokenUserDefined}},
      {105, {"<|turn>", df::synth::kTokenControl}},
      {106, {"<turn|>", df::synth::kTokenControl}},
      {107, {"\n", df::synth::kTokenNormal}},
      {108, {"\n\n", df::synth::kTokenNormal}},
  };
  for (const auto& [id, want] : expected) {
    EXPECT_EQ(v.tokens[size_t(id)], want.first) << id;
    EXPECT_EQ(v.token_types[size_t(id)], want.second) << id;
  }
  EXPECT_EQ(v.bos_id, 2u);
  EXPECT_EQ(v.eos_id, 1u);
  EXPECT_EQ(v.pad_id, 0u);
  EXPECT_EQ(v.unk_id, std::optional<uint32_t>(3));
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.has_add_eos);
  EXPECT_EQ(v.add_space_prefix, std::optional<bool>(false));
  EXPECT_EQ(v.model, "gemma4");
  EXPECT_TRUE(v.pre.empty());
  EXPECT_EQ(v.scores, std::vector<float>(v.tokens.size(), -1000.0f));
  // All 256 byte tokens, upper-case hex, typed BYTE.
  for (int b = 0; b < 256; ++b) {
    const auto it = std::find(v.tokens.begin(), v.tokens.end(), fmt::format("<0x{:02X}>", b));
    ASSERT_NE(it, v.tokens.end()) << b;
    EXPECT_EQ(v.token_types[size_t(it - v.tokens.begin())], df::synth::kTokenByte);
  }
}

TEST(SynthGemma4Vocab, MergesJoinTwoTokensIntoATokenAndNeverHoldAPlainSpace) {
  for (int n : {df::synth::gemma4_min_vocab_size(), 2048, 8192}) {
    const auto v = build_gemma4_vocab(n);
    ASSERT_EQ(v.tokens.size(), size_t(n));
    const std::set<std::string> tokens(v.tokens.begin(), v.tokens.end());
    EXPECT_EQ(tokens.size(), v.tokens.size()) << "duplicate tokens";
    for (const std::string& m : v.merges) {
      // llama.cpp splits at the first space after position 0 and asserts that neither part holds a space.
      const size_t sep = m.find(' ', 1);
      ASSERT_NE(sep, std::string::npos) << m;
      const std::string left = m.substr(0, sep), right = m.substr(sep + 1);
      EXPECT_EQ(right.find(' '), std::string::npos) << m;
      EXPECT_TRUE(tokens.count(left) && tokens.count(right) && tokens.count(left + right)) << m;
    }
    for (const std::string& t : v.tokens) {
      EXPECT_EQ(t.find(' '), std::string::npos) << "a space in token '" << t << "'";
    }
  }
}

TEST(SynthGemma4Vocab, IsDeterministicAndRefusesTooSmallSizes) {
  const auto a = build_gemma4_vocab(3000), b = build_gemma4_vocab(3000);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
  const int min = df::synth::gemma4_min_vocab_size();
  EXPECT_NO_THROW(build_gemma4_vocab(min));
  df::testing::expect_error([&] { build_gemma4_vocab(min - 1); },
                            {"--vocab " + std::to_string(min - 1), "at least " + std::to_string(min)});
}

TEST(SynthGemma4Vocab, WriteVocabWritesTheGemma4ConverterKeys) {
  const auto v = build_gemma4_vocab(2048);
  df::gguf::Writer w;
  w.set("general.architecture", df::gguf::Value::of_string("gemma4"));
  df::synth::write_vocab(w, v);
  std::filesystem::create_directories(DF_TEST_TMP);
  const std::string path = std::string(DF_TEST_TMP) + "/gemma4_vocab.gguf";
  w.write(path, std::vector<std::vector<uint8_t>>{});

  const auto f = df::gguf::File::open(path);
  EXPECT_EQ(f.require_string("tokenizer.ggml.model"), "gemma4");
  EXPECT_FALSE(f.has("tokenizer.ggml.pre"));  // llama.cpp forces "gemma4"; the converter writes none
  EXPECT_EQ(f.require("tokenizer.ggml.tokens").arr.size(), v.tokens.size());
  const auto& scores = f.require("tokenizer.ggml.scores");
  EXPECT_EQ(scores.elem, df::gguf::ValueType::FLOAT32);
  EXPECT_EQ(scores.arr.size(), v.tokens.size());
  EXPECT_EQ(f.require("tokenizer.ggml.token_type").arr.size(), v.tokens.size());
  EXPECT_EQ(f.require("tokenizer.ggml.merges").arr.size(), v.merges.size());
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), std::optional<int64_t>(2));
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), std::optional<int64_t>(1));
  EXPECT_EQ(f.get_int("tokenizer.ggml.unknown_token_id"), std::optional<int64_t>(3));
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), std::optional<int64_t>(0));
  EXPECT_EQ(f.get_bool("tokenizer.ggml.add_space_prefix"), std::optional<bool>(false));
  EXPECT_EQ(f.get_bool("tokenizer.ggml.add_bos_token"), std::optional<bool>(true));
  EXPECT_FALSE(f.has("tokenizer.ggml.add_eos_token"));
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), std::optional<std::string>(v.chat_template));
}

}  // namespace

// Vocabulary loading: malformed or unsupported tokenizer metadata is refused with a message that names the
// key and the value at fault, both for a spec built in memory and for GGUF files written to disk.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace {

using df::gguf::Value;
using df::gguf::ValueType;
using df::tok::Vocab;
using df::tok::VocabSpec;

VocabSpec valid_spec() {
  VocabSpec spec;
  spec.pre = "qwen2";
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(df::tok::byte_to_unicode(static_cast<uint8_t>(b)));
  spec.token_types.assign(256, 1);
  spec.merges = {"a b"};
  spec.eos = 0;
  return spec;
}

// Builds the vocabulary and returns the error message ("" if it was accepted).
std::string error_of(const VocabSpec& spec) {
  try {
    Vocab::build(spec);
  } catch (const df::Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const VocabSpec& spec, std::initializer_list<std::string_view> fragments) {
  const std::string msg = error_of(spec);
  ASSERT_FALSE(msg.empty()) << "accepted";
  for (const auto f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
}

TEST(VocabSpecErrors, ValidSpecIsAccepted) { EXPECT_EQ(error_of(valid_spec()), ""); }

TEST(VocabSpecErrors, UnsupportedModelAndPreTokenizer) {
  auto spec = valid_spec();
  spec.model = "llama";
  expect_error(spec, {"'llama'", "tokenizer.ggml.model"});
  spec = valid_spec();
  spec.pre = "falcon";
  expect_error(spec, {"'falcon'", "tokenizer.ggml.pre", "qwen2"});
  spec.pre = "";
  expect_error(spec, {"tokenizer.ggml.pre"});
}

TEST(VocabSpecErrors, ArrayLengthsAndTokenTypes) {
  auto spec = valid_spec();
  spec.token_types.pop_back();
  expect_error(spec, {"token_type has 255", "tokens has 256"});
  spec = valid_spec();
  spec.token_types[7] = 9;
  expect_error(spec, {"token type 9", "token 7"});
  spec = valid_spec();
  spec.tokens.clear();
  spec.token_types.clear();
  expect_error(spec, {"empty"});
}

TEST(VocabSpecErrors, DuplicateTokens) {
  auto spec = valid_spec();
  spec.tokens[200] = spec.tokens[100];
  expect_error(spec, {"duplicate", "100", "200"});
}

TEST(VocabSpecErrors, Merges) {
  auto spec = valid_spec();
  spec.merges = {"a b", "cd"};
  expect_error(spec, {"merge #1", "'cd'"});
  spec.merges = {"a "};
  expect_error(spec, {"merge #0"});
  spec.merges.clear();
  expect_error(spec, {"tokenizer.ggml.merges"});
}

TEST(VocabSpecErrors, SpecialIdsOutOfRange) {
  auto spec = valid_spec();
  spec.bos = 256;
  expect_error(spec, {"bos_token_id = 256", "256 tokens"});
  spec = valid_spec();
  spec.eos = -1;
  expect_error(spec, {"eos_token_id = -1"});
  spec = valid_spec();
  spec.pad = 100000;  // llama.cpp ignores a bad padding id; so do we
  EXPECT_EQ(error_of(spec), "");
}

TEST(VocabSpecErrors, AddBosWithoutBos) {
  auto spec = valid_spec();
  spec.tokens.resize(11);  // the default BOS id 11 is then out of range
  spec.token_types.resize(11);
  spec.eos = 0;
  spec.add_bos = true;
  expect_error(spec, {"add_bos_token", "no BOS"});
}

TEST(VocabSpecDefaults, ByteLevelBpeDefaultsBosAndEosTo11) {
  auto spec = valid_spec();
  spec.eos.reset();
  const Vocab v = Vocab::build(spec);
  EXPECT_EQ(v.bos(), 11);
  EXPECT_EQ(v.eos(), 11);
  EXPECT_FALSE(v.add_bos());
  spec.pre = "llama-bpe";
  EXPECT_TRUE(Vocab::build(spec).add_bos());
  EXPECT_TRUE(Vocab::build(spec).ignore_merges());
}

TEST(VocabSpecDefaults, EmptyTokenGetsLlamaCppPlaceholderName) {
  auto spec = valid_spec();
  spec.tokens.push_back("");
  spec.token_types.push_back(1);
  const Vocab v = Vocab::build(spec);
  EXPECT_EQ(v.text(256), "[EMPTY_256]");
}

// GGUF files: the reader's metadata goes through the same checks, plus type checks of the keys.
class VocabGguf : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test: ctest runs the tests of this file in parallel processes.
    dir_ = std::filesystem::path(DF_TEST_TMP) / "tokenizer_vocab" /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(df::tok::byte_to_unicode(static_cast<uint8_t>(b)));
    kv_ = {
        {"general.architecture", Value::of_string("qwen3moe")},
        {"tokenizer.ggml.model", Value::of_string("gpt2")},
        {"tokenizer.ggml.pre", Value::of_string("qwen2")},
        {"tokenizer.ggml.tokens", Value::of_strings(tokens)},
        {"tokenizer.ggml.token_type", Value::of_i32s(std::vector<int32_t>(256, 1))},
        {"tokenizer.ggml.merges", Value::of_strings({"a b"})},
        {"tokenizer.ggml.eos_token_id", Value::of_u32(10)},
    };
  }
  // Writes the file with `key` replaced (or removed when `v` is null) and loads its tokenizer.
  std::string load_error(const std::string& key, const Value* v) {
    df::gguf::Writer w;
    for (const auto& [k, val] : kv_) {
      if (k != key)
        w.set(k, val);
      else if (v)
        w.set(k, *v);
    }
    const std::string path = (dir_ / "vocab.gguf").string();
    w.write(path, std::vector<std::vector<uint8_t>>{});
    try {
      const auto file = df::gguf::File::open(path);
      df::tok::Tokenizer::from_gguf(file);
    } catch (const df::Error& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
  std::vector<std::pair<std::string, Value>> kv_;
};

TEST_F(VocabGguf, ValidFileLoads) { EXPECT_EQ(load_error("", nullptr), ""); }

TEST_F(VocabGguf, MissingOrMistypedKeys) {
  EXPECT_NE(load_error("tokenizer.ggml.tokens", nullptr).find("tokenizer.ggml.tokens"), std::string::npos);
  EXPECT_NE(load_error("tokenizer.ggml.model", nullptr).find("tokenizer.ggml.model"), std::string::npos);
  const Value ints = Value::of_i32s({1, 2, 3});
  EXPECT_NE(load_error("tokenizer.ggml.tokens", &ints).find("array of strings"), std::string::npos);
  const Value strings = Value::of_strings({"x"});
  EXPECT_NE(load_error("tokenizer.ggml.token_type", &strings), "");
  const Value short_types = Value::of_i32s({1, 1});
  EXPECT_NE(load_error("tokenizer.ggml.token_type", &short_types).find("has 2 entries"), std::string::npos);
  const Value bad_merges = Value::of_strings({"ab"});
  EXPECT_NE(load_error("tokenizer.ggml.merges", &bad_merges).find("merge #0"), std::string::npos);
  const Value text_id = Value::of_string("ten");
  EXPECT_NE(load_error("tokenizer.ggml.eos_token_id", &text_id), "");
  const Value big_id = Value::of_u32(4096);
  EXPECT_NE(load_error("tokenizer.ggml.eos_token_id", &big_id).find("out of range"), std::string::npos);
  const Value spm = Value::of_string("llama");
  EXPECT_NE(load_error("tokenizer.ggml.model", &spm).find("'llama'"), std::string::npos);
}

}  // namespace

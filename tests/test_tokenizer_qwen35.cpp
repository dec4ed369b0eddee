// The Qwen3.5 vocabulary of `make-model --arch qwen35moe` (tokenizer.ggml.pre = qwen35, ARCHITECTURES.md 5.6)
// against llama.cpp: tests/data/tokenizer/qwen35_cases.json holds what llama.cpp v0.4.0 made of the file that
// `make-model --arch qwen35moe --preset tiny --seed 1` writes (see "about" there): token ids of texts with
// and without special tokens parsed, their detokenization, the token attributes, the end-of-generation set,
// and the chat template rendered by common_chat_templates_apply with thinking on and off. This test writes
// the same file with the diskformer binary and checks ours against all of it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli_run.h"
#include "gguf/gguf.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace {

using df::tok::TokenId;
using df::tok::Tokenizer;
using json = nlohmann::json;

const json& fixture() {
  static const json j = [] {
    std::ifstream in(std::filesystem::path(__FILE__).parent_path() / "data/tokenizer/qwen35_cases.json");
    if (!in) throw std::runtime_error("cannot open tests/data/tokenizer/qwen35_cases.json");
    return json::parse(in);
  }();
  return j;
}

// The file's tokenizer and chat template, from a file make-model writes for this process (tests run in
// parallel processes, so each writes its own) and removes again.
struct Model {
  std::optional<Tokenizer> tokenizer;
  std::string chat_template, pre;
};

const Model& model() {
  static const Model m = [] {
    std::filesystem::create_directories(DF_TEST_TMP);
    const std::string path = fmt::format("{}/qwen35moe-tiny-{}.gguf", DF_TEST_TMP, ::getpid());
    const auto r = df::testing::run_shell(
        fmt::format("make-model {} -q -o {}", fixture()["make_model_args"].get<std::string>(), path), "&1");
    if (r.status != 0) throw std::runtime_error("make-model failed: " + r.out);
    Model out;
    {
      const auto file = df::gguf::File::open(path);
      out.tokenizer.emplace(Tokenizer::from_gguf(file));
      out.chat_template = file.get_string("tokenizer.chat_template").value_or("");
      out.pre = file.get_string("tokenizer.ggml.pre").value_or("");
    }
    std::filesystem::remove(path);
    return out;
  }();
  return m;
}

std::vector<TokenId> ids_of(const json& j) { return j.get<std::vector<TokenId>>(); }

std::string hex(const std::string& s) {
  std::string out;
  for (const unsigned char c : s) out += fmt::format("{:02x}", c);
  return out;
}

TEST(Qwen35Tokenizer, TheFileHasTheQwen35VocabularyLlamaCppRead) {
  const Tokenizer& tok = *model().tokenizer;
  const json& f = fixture();
  EXPECT_EQ(model().pre, "qwen35");
  EXPECT_EQ(tok.vocab().pre_tokenizer(), df::tok::PreTokenizer::kQwen35);
  ASSERT_EQ(tok.n_vocab(), f["n_vocab"].get<size_t>());
  EXPECT_EQ(tok.bos(), f["bos"].get<TokenId>());
  EXPECT_EQ(tok.eos(), f["eos"].get<TokenId>());
  EXPECT_EQ(tok.token_text(tok.bos()), "<|endoftext|>");
  EXPECT_EQ(tok.token_text(tok.eos()), "<|im_end|>");
  EXPECT_EQ(tok.add_bos(), f["add_bos"].get<bool>());
  EXPECT_EQ(tok.add_eos(), f["add_eos"].get<bool>());
  EXPECT_FALSE(tok.add_bos());
  // The Qwen3 added tokens close the vocabulary, in the real order: <think> is 24 after <|endoftext|>.
  const TokenId endoftext = *tok.token_id("<|endoftext|>");
  EXPECT_EQ(*tok.token_id("<|im_start|>"), endoftext + 1);
  EXPECT_EQ(*tok.token_id("<|im_end|>"), endoftext + 2);
  EXPECT_EQ(*tok.token_id("<tool_call>"), endoftext + 14);
  EXPECT_EQ(*tok.token_id("<think>"), endoftext + 24);
  EXPECT_EQ(*tok.token_id("</think>"), endoftext + 25);
  EXPECT_EQ(static_cast<size_t>(endoftext) + 26, tok.n_vocab());
  // Attributes and the end-of-generation set (<|im_end|>, <|endoftext|>, and the FIM pad / repo / file
  // separator tokens, as llama.cpp adds them).
  const json& attrs = f["attrs_not_normal"];
  for (TokenId t = 0; t < static_cast<TokenId>(tok.n_vocab()); ++t) {
    const std::string key = std::to_string(t);
    const uint32_t want = attrs.contains(key) ? attrs[key].get<uint32_t>() : df::tok::kAttrNormal;
    EXPECT_EQ(tok.vocab().attr(t), want) << t << " " << tok.token_text(t);
  }
  std::vector<TokenId> eog;
  for (TokenId t = 0; t < static_cast<TokenId>(tok.n_vocab()); ++t)
    if (tok.is_eog(t)) eog.push_back(t);
  EXPECT_EQ(eog, ids_of(f["eog"]));
}

TEST(Qwen35Tokenizer, EveryTextTokenizesAndDetokenizesAsInLlamaCpp) {
  const Tokenizer& tok = *model().tokenizer;
  const json& cases = fixture()["cases"];
  ASSERT_GE(cases.size(), 40u);
  for (const json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::string text = c["text"];
    EXPECT_EQ(tok.encode(text, false, false), ids_of(c["ids"]));
    const auto parsed = tok.encode(text, false, true);
    EXPECT_EQ(parsed, ids_of(c["ids_parse"]));
    EXPECT_EQ(hex(tok.decode(parsed, false, false)), c["detok_hex"][0].get<std::string>());
    EXPECT_EQ(hex(tok.decode(parsed, false, true)), c["detok_hex"][1].get<std::string>());
  }
}

// Words with combining marks were in the vocabulary's training text: they come out as few tokens, where the
// split keeps them whole.
TEST(Qwen35Tokenizer, WordsWithCombiningMarksAreFewTokens) {
  const Tokenizer& tok = *model().tokenizer;
  for (const char* word : {"नमस्ते", " दुनिया", "สวัสดี", "cafe\u0301", " re\u0301sume\u0301"}) {
    EXPECT_LE(tok.encode(word, false, false).size(), 2u) << word;
  }
}

TEST(Qwen35Tokenizer, TheChatTemplateRendersAsInLlamaCpp) {
  const Tokenizer& tok = *model().tokenizer;
  const df::ChatTemplate tmpl(model().chat_template);
  const json& cases = fixture()["chat_cases"];
  ASSERT_GE(cases.size(), 7u);
  for (const json& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<df::ChatMessage> messages;
    for (const json& m : c["messages"])
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    df::ChatOptions options;
    options.bos_token = tok.token_text(tok.bos());
    options.eos_token = tok.token_text(tok.eos());
    options.add_generation_prompt = c["add_generation_prompt"];
    options.enable_thinking = c["enable_thinking"];
    const std::string prompt = tmpl.render(messages, options);
    EXPECT_EQ(prompt, c["prompt"].get<std::string>());
    EXPECT_EQ(tok.encode(prompt, tok.add_bos(), true), ids_of(c["prompt_ids"]));
    // The generation prompt opens the reasoning block, or closes an empty one when thinking is off.
    if (options.add_generation_prompt) {
      const std::string tail = options.enable_thinking ? "<|im_start|>assistant\n<think>\n"
                                                       : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
      EXPECT_TRUE(prompt.ends_with(tail)) << prompt;
    }
  }
}

}  // namespace

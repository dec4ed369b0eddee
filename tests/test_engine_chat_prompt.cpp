// Chat prompts end to end: template rendering + BOS handling + tokenization must give llama.cpp's prompt ids.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "cli_run.h"
#include "engine/chat_prompt.h"
#include "error_matchers.h"
#include "gguf/gguf.h"
#include "golden_json.h"
#include "util/error.h"

using df::testing::golden_json;
using df::testing::golden_path;

namespace {

std::vector<df::ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<df::ChatMessage> out;
  for (const auto& m : j) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

}  // namespace

class ChatPromptGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(ChatPromptGolden, IdsEqualLlamaCpp) {
  const std::string model = GetParam();
  auto file = df::gguf::File::open(golden_path(model + ".gguf"));
  auto tokenizer = df::tok::Tokenizer::from_gguf(file);
  auto tmpl = file.get_string("tokenizer.chat_template");
  ASSERT_TRUE(tmpl.has_value());
  auto j = golden_json(model);
  // One builder for every case, as a chat uses it turn after turn: no state leaks from one render to the
  // next.
  const df::ChatPromptBuilder builder(tokenizer, tmpl);
  for (const auto& c : j["chat"]["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto p = builder.build(messages_of(c["messages"]), c["add_generation_prompt"]);
    EXPECT_EQ(p.text, c["prompt"].get<std::string>());
    EXPECT_EQ(p.ids, c["prompt_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(
        df::build_chat_prompt(tokenizer, tmpl, messages_of(c["messages"]), c["add_generation_prompt"]).ids,
        p.ids);
  }
}

TEST(ChatPromptBuilder, ATemplateSyntaxErrorIsReportedWhenTheBuilderIsMade) {
  auto file = df::gguf::File::open(golden_path("lfm2moe-tiny.gguf"));
  auto tokenizer = df::tok::Tokenizer::from_gguf(file);
  df::testing::expect_error(
      [&] { df::ChatPromptBuilder(tokenizer, std::string("{% for m in messages %}{{ m.content }}")); },
      {"endfor"});
  const df::ChatPromptBuilder empty(tokenizer, std::string());  // empty: the fallback rendering
  df::testing::expect_error([&] { empty.build({}); }, {"a chat needs at least one message"});
  EXPECT_TRUE(empty.build({{"user", "hi"}}).opens_reasoning);
}

// A generation prompt that opens a harmony message (gpt-oss's template ends with "<|start|>assistant") says
// so, and the reply's channels then decide what is reasoning; a think template's does not.
TEST(ChatPromptBuilder, AHarmonyGenerationPromptIsRecognised) {
  auto file = df::gguf::File::open(golden_path("lfm2moe-tiny.gguf"));
  auto tokenizer = df::tok::Tokenizer::from_gguf(file);
  const df::ChatPromptBuilder harmony(
      tokenizer, std::string("{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
                             "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}"));
  const auto p = harmony.build({{"user", "hi"}});
  EXPECT_TRUE(p.harmony);
  EXPECT_FALSE(p.opens_reasoning);
  EXPECT_FALSE(harmony.build({{"user", "hi"}}, /*add_generation_prompt=*/false).harmony);
  const df::ChatPromptBuilder fallback(tokenizer, std::string());
  EXPECT_FALSE(fallback.build({{"user", "hi"}}).harmony);
}

// A Gemma 4 generation prompt (a model turn opened, with or without the empty thought channel that turns
// thinking off) says that the reply's thought channel is reasoning; others do not.
TEST(ChatPromptBuilder, AGemma4ModelTurnIsRecognised) {
  auto file = df::gguf::File::open(golden_path("lfm2moe-tiny.gguf"));
  auto tokenizer = df::tok::Tokenizer::from_gguf(file);
  const std::string turns =
      "{% for m in messages %}<|turn>{{ m.role }}\n{{ m.content }}<turn|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|turn>model\n";
  const df::ChatPromptBuilder thinking(tokenizer, turns + "{% endif %}");
  const df::ChatPromptBuilder not_thinking(tokenizer, turns + "<|channel>thought\n<channel|>{% endif %}");
  EXPECT_TRUE(thinking.build({{"user", "hi"}}).gemma_channels);
  EXPECT_TRUE(not_thinking.build({{"user", "hi"}}).gemma_channels);
  EXPECT_FALSE(thinking.build({{"user", "hi"}}, /*add_generation_prompt=*/false).gemma_channels);
  EXPECT_FALSE(thinking.build({{"user", "hi"}}).harmony);
  const df::ChatPromptBuilder fallback(tokenizer, std::string());
  EXPECT_FALSE(fallback.build({{"user", "hi"}}).gemma_channels);
}

// Qwen3.5 (the template make-model writes for qwen35moe, as the real one): the generation prompt opens the
// reasoning block, so the reply starts in reasoning (run --chat, chat and serve split it off up to </think>);
// with thinking off the template closes an empty block and the reply is content.
TEST(ChatPromptBuilder, AQwen35GenerationPromptOpensReasoningUnlessThinkingIsOff) {
  std::filesystem::create_directories(DF_TEST_TMP);
  const std::string path = fmt::format("{}/qwen35moe-tiny-{}.gguf", DF_TEST_TMP, ::getpid());
  const auto made =
      df::testing::run_shell("make-model --arch qwen35moe --preset tiny --seed 1 -q -o " + path, "&1");
  ASSERT_EQ(made.status, 0) << made.out;
  auto file = df::gguf::File::open(path);
  auto tokenizer = df::tok::Tokenizer::from_gguf(file);
  auto tmpl = file.get_string("tokenizer.chat_template");
  std::filesystem::remove(path);
  ASSERT_TRUE(tmpl.has_value());

  const df::ChatPromptBuilder thinking(tokenizer, tmpl);
  const auto p = thinking.build({{"user", "hi"}});
  EXPECT_EQ(p.text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_TRUE(p.opens_reasoning);
  EXPECT_FALSE(p.harmony);
  EXPECT_FALSE(p.gemma_channels);
  ASSERT_GE(p.ids.size(), 2u);
  EXPECT_EQ(p.ids[p.ids.size() - 2], *tokenizer.token_id("<think>"));
  EXPECT_EQ(p.ids.front(), *tokenizer.token_id("<|im_start|>"));  // no BOS
  EXPECT_FALSE(thinking.build({{"user", "hi"}}, /*add_generation_prompt=*/false).opens_reasoning);
  // An earlier reply's reasoning is dropped once a later user turn follows.
  const auto second =
      thinking.build({{"user", "hi"}, {"assistant", "<think>\nGreet.\n</think>\n\nHello!"}, {"user", "bye"}});
  EXPECT_EQ(second.text,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nbye"
            "<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_TRUE(second.opens_reasoning);

  // The builder renders with enable_thinking on; setting it in the template stands for a caller that turns it
  // off.
  const df::ChatPromptBuilder not_thinking(tokenizer, "{%- set enable_thinking = false -%}" + *tmpl);
  const auto q = not_thinking.build({{"user", "hi"}});
  EXPECT_EQ(q.text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_FALSE(q.opens_reasoning);
}

INSTANTIATE_TEST_SUITE_P(Golden, ChatPromptGolden,
                         ::testing::Values("lfm2moe-tiny", "lfm2moe-medium", "lfm2moe-tiny-f16",
                                           "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny",
                                           "qwen35moe-tiny"));

// Without a template in the file, lfm2moe falls back to the seed's LFM2.5 rendering (what the real template
// produces): explicit <|startoftext|>, earlier reasoning dropped, generation prompt opening <think>.
TEST(ChatPromptFallback, Lfm2RenderingWhenTheFileHasNoTemplate) {
  auto file = df::gguf::File::open(golden_path("lfm2moe-tiny.gguf"));
  auto tokenizer = df::tok::Tokenizer::from_gguf(file);
  auto j = golden_json("lfm2moe-tiny");
  for (const auto& c : j["chat"]["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto& seed = c["informational_seed_lfm2ChatPrompt"];
    auto p = df::build_chat_prompt(tokenizer, std::nullopt, messages_of(c["messages"]));
    EXPECT_EQ(p.ids, seed["ids_parse_special"].get<std::vector<int32_t>>());
    EXPECT_TRUE(p.opens_reasoning);
    ASSERT_FALSE(p.ids.empty());
    EXPECT_EQ(p.ids[0], tokenizer.bos());
    EXPECT_NE(p.ids[1], tokenizer.bos());  // no second BOS
  }
}

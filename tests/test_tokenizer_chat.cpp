// Chat prompts: every golden chat case renders to exactly the prompt llama.cpp produced, the LFM2 fallback
// equals the seed engine's lfm2ChatPrompt(), and the ChatOptions behave as llama.cpp's chat layer does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/chat.h"
#include "util/error.h"

namespace df {
namespace {

using json = nlohmann::ordered_json;

std::vector<std::filesystem::path> golden_models() {
  std::vector<std::filesystem::path> out;
  // The shared fixtures and the project's own (golden_json.h).
  for (const char* dir : {DF_GOLDEN_DIR, DF_OWN_GOLDEN_DIR})
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::vector<ChatMessage> messages_of(const json& j) {
  std::vector<ChatMessage> out;
  for (const json& m : j) out.push_back({m.at("role"), m.at("content"), std::nullopt});
  return out;
}

// The text of the special token with id `id` (the golden JSON lists special tokens by text).
std::string special_text(const json& model, int64_t id) {
  for (const auto& [text, tid] : model.at("model").at("special_ids").items()) {
    if (tid.get<int64_t>() == id) return text;
  }
  ADD_FAILURE() << "no special token with id " << id;
  return "";
}

TEST(ChatGoldenTest, EveryCaseMatchesLlamaCpp) {
  const auto models = golden_models();
  ASSERT_GE(models.size(), 5u);
  size_t cases = 0;
  for (const auto& path : models) {
    const json model = read_json(path);
    const json& tok = model.at("tokenizer");
    ChatOptions options;
    options.bos_token = special_text(model, tok.at("bos_id"));
    options.eos_token = special_text(model, tok.at("eos_id"));
    options.strip_leading_bos = tok.at("add_bos");
    options.strip_trailing_eos = tok.at("add_eos");
    const ChatTemplate tmpl(model.at("chat").at("chat_template").get<std::string>());
    for (const json& c : model.at("chat").at("cases")) {
      SCOPED_TRACE(path.filename().string() + " / " + c.at("name").get<std::string>());
      options.add_generation_prompt = c.at("add_generation_prompt");
      EXPECT_EQ(tmpl.render(messages_of(c.at("messages")), options), c.at("prompt").get<std::string>());
      ++cases;
    }
  }
  // three cases of each of the five shared models, hy_v3-tiny, gemma4-tiny and qwen35moe-tiny
  EXPECT_EQ(cases, 24u);
}

TEST(ChatGoldenTest, Lfm2FallbackEqualsSeedPrompt) {
  size_t cases = 0;
  for (const auto& path : golden_models()) {
    const json model = read_json(path);
    if (model.at("model").at("arch") != "lfm2moe") continue;
    for (const json& c : model.at("chat").at("cases")) {
      SCOPED_TRACE(path.filename().string() + " / " + c.at("name").get<std::string>());
      EXPECT_EQ(render_lfm2_fallback(messages_of(c.at("messages"))),
                c.at("informational_seed_lfm2ChatPrompt").at("prompt").get<std::string>());
      ++cases;
    }
  }
  EXPECT_EQ(cases, 9u);
}

TEST(ChatTest, Lfm2FallbackDropsEarlierReasoning) {
  const std::vector<ChatMessage> msgs = {
      {"system", "", std::nullopt},  // an empty system turn is left out
      {"user", "q1", std::nullopt},
      {"assistant", "<|think|>plan<|/think|> \xc2\xa0<think>a</think>\n b</think>  answer\n", std::nullopt},
      {"user", "q2", std::nullopt},
      {"assistant", "<think>kept</think>after the last user turn", std::nullopt},
  };
  EXPECT_EQ(render_lfm2_fallback(msgs),
            "<|startoftext|><|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\nanswer<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>kept</think>after the last user "
            "turn<|im_end|>\n"
            "<|im_start|>assistant\n<think>");
  // JavaScript's trim() also removes NBSP and U+3000; other reasoning markers stay when there is no </think>.
  EXPECT_EQ(
      render_lfm2_fallback({{"user", "a", std::nullopt},
                            {"assistant", "\xe3\x80\x80<|think|>open only \xc2\xa0", std::nullopt},
                            {"user", "b", std::nullopt}}),
      "<|startoftext|><|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n<|think|>open only<|im_end|>\n"
      "<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n<think>");
}

const char* kQwenStyle =
    "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' -}}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}{%- endif -%}";

TEST(ChatTest, EnableThinkingReachesTheTemplate) {
  const std::vector<ChatMessage> msgs = {{"user", "hi", std::nullopt}};
  ChatOptions options;
  EXPECT_EQ(render_chat(kQwenStyle, msgs, options),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  options.enable_thinking = false;
  EXPECT_EQ(render_chat(kQwenStyle, msgs, options),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  options.add_generation_prompt = false;
  EXPECT_EQ(render_chat(kQwenStyle, msgs, options), "<|im_start|>user\nhi<|im_end|>\n");
}

TEST(ChatTest, StripsOnlyALeadingBosAndATrailingEos) {
  const std::string tmpl = "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}";
  ChatOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  const std::vector<ChatMessage> msgs = {{"user", "x<s>", std::nullopt}};
  EXPECT_EQ(render_chat(tmpl, msgs, options), "<s>x<s></s>");
  options.strip_leading_bos = true;
  EXPECT_EQ(render_chat(tmpl, msgs, options), "x<s></s>");
  options.strip_trailing_eos = true;
  EXPECT_EQ(render_chat(tmpl, msgs, options), "x<s>");
  // Nothing to strip when the template does not start with BOS.
  EXPECT_EQ(render_chat("[{{ bos_token }}]", msgs, options), "[<s>]");
}

TEST(ChatTest, ContextCarriesReasoningAndExtraVariables) {
  ChatOptions options;
  options.extra_context = {{"reasoning_effort", "high"}, {"enable_thinking", "overridden"}};
  const std::vector<ChatMessage> msgs = {{"assistant", "a", std::string("why")}, {"user", "b", std::nullopt}};
  const json context = chat_template_context(msgs, options);
  EXPECT_EQ(
      context.at("messages").dump(),
      R"([{"role":"assistant","content":"a","reasoning_content":"why"},{"role":"user","content":"b"}])");
  EXPECT_EQ(context.at("reasoning_effort"), "high");
  EXPECT_EQ(context.at("enable_thinking"), "overridden");
  EXPECT_EQ(render_chat("{{ messages[0].reasoning_content }}|{{ messages[1].reasoning_content is defined }}|"
                        "{{ reasoning_effort }}",
                        msgs, options),
            "why|False|high");
}

TEST(ChatTest, SystemTurnIsMergedWhenTheTemplateCannotRenderIt) {
  // Like Mistral's and Gemma's older templates: a system message raises.
  const ChatTemplate raising(
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}[{{ m.role }}:{{ m.content }}]{% endfor %}");
  EXPECT_FALSE(raising.supports_system_role());
  ChatOptions options;
  EXPECT_EQ(raising.render({{"system", "be brief"}, {"user", "hi"}, {"assistant", "yo"}}, options),
            "[user:be brief\nhi][assistant:yo]");
  EXPECT_EQ(raising.render({{"system", "alone"}}, options), "");
  // A template that silently skips system messages gets the same treatment; ChatML renders them as they are.
  const ChatTemplate skipping("{% for m in messages if m.role != 'system' %}[{{ m.content }}]{% endfor %}");
  EXPECT_FALSE(skipping.supports_system_role());
  EXPECT_EQ(skipping.render({{"system", "s"}, {"user", "u"}}, options), "[s\nu]");
  const ChatTemplate chatml(kQwenStyle);
  EXPECT_TRUE(chatml.supports_system_role());
  options.add_generation_prompt = false;
  EXPECT_EQ(chatml.render({{"system", "s"}, {"user", "u"}}, options),
            "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n");
}

TEST(ChatTest, DeveloperBecomesSystemExceptForHarmony) {
  ChatOptions options;
  options.add_generation_prompt = false;
  EXPECT_EQ(render_chat(kQwenStyle, {{"developer", "d"}}, options), "<|im_start|>system\nd<|im_end|>\n");
  const std::string harmony =
      "{% for m in messages %}<|start|>{{ m.role }}<|channel|>{{ m.content }}{% endfor %}";
  EXPECT_EQ(render_chat(harmony, {{"developer", "d"}}, options), "<|start|>developer<|channel|>d");
}

TEST(ChatTest, DateVariablesFollowTheRenderClock) {
  setenv("TZ", "UTC", 1);
  tzset();
  ChatOptions options;
  options.render.now = 1749988800;  // 2025-06-15 12:00 UTC
  const json context = chat_template_context({{"user", "hi"}}, options);
  EXPECT_EQ(context.at("date_string"), "15 Jun 2025");
  EXPECT_EQ(context.at("datetime"), "Jun 15 2025");
  // Llama 3.x prints date_string when it is defined (llama.cpp passes it), its built-in date otherwise.
  std::ifstream in(std::filesystem::path(__FILE__).parent_path() / "data" / "templates" /
                   "llama-3.3-70b-instruct.jinja");
  const std::string llama3((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(llama3.empty());
  options.bos_token = "<|begin_of_text|>";
  options.strip_leading_bos = true;
  EXPECT_EQ(render_chat(llama3, {{"user", "hi"}}, options),
            "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 15 Jun 2025\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTest, BadTemplatesAreReportedWithPositions) {
  try {
    ChatTemplate tmpl("{% for m in messages %}\n{{ m.content }\n{% endfor %}");
    FAIL() << "expected a syntax error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("chat template: syntax error at line 2, column 1"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace df

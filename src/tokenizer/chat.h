#pragma once
// Chat prompts: a conversation rendered through the model's chat template (the GGUF's
// tokenizer.chat_template) the way llama.cpp's common_chat_templates_apply() does it, and the LFM2 prompt of
// the reference engine for GGUFs that carry no template.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja.h"

namespace df {

struct ChatMessage {
  std::string role;
  std::string content;
  // Given to the template as message.reasoning_content when set (templates such as Qwen3's render it). The
  // initializer lets {role, content} aggregates compile warning-free.
  std::optional<std::string> reasoning_content = std::nullopt;
};

struct ChatOptions {
  bool add_generation_prompt = true;
  std::string bos_token;  // the vocab's BOS and EOS texts, as the template sees them
  std::string eos_token;
  bool enable_thinking = true;  // the template variable enable_thinking
  // llama.cpp removes a bos_token the template rendered at the start when the vocab adds BOS itself (and an
  // eos_token at the end when it adds EOS), so that the tokenizer does not produce two.
  bool strip_leading_bos = false;
  bool strip_trailing_eos = false;
  // More template variables (tools, reasoning_effort, ...); they override the ones above.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
  jinja::RenderOptions render;  // strftime_now's clock and the evaluation limits
};

// A parsed chat template, to render many conversations with. Before rendering, the messages get llama.cpp's
// workarounds: "developer" becomes "system" (except for gpt-oss's harmony template, which has its own
// developer turn), and a template that does not render a system message (probed once, as llama.cpp does) gets
// the system text merged into the next message ("system\nuser"), or dropped when it is the only message.
class ChatTemplate {
 public:
  // Throws df::Error naming the line and column of a syntax error.
  explicit ChatTemplate(std::string_view source);

  std::string render(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;

  bool supports_system_role() const { return supports_system_role_; }

 private:
  jinja::Template template_;
  bool supports_system_role_ = true;
  bool maps_developer_to_system_ = true;
};

// The variables a chat template is rendered with: messages, bos_token, eos_token, add_generation_prompt,
// enable_thinking, date_string ("15 Jun 2025") and datetime ("Jun 15 2025") of the render clock (local time),
// as llama.cpp provides them, then extra_context.
nlohmann::ordered_json chat_template_context(const std::vector<ChatMessage>& messages,
                                             const ChatOptions& options);

std::string render_chat(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                        const ChatOptions& options);

// The seed engine's lfm2ChatPrompt(), for LFM2 GGUFs without a chat template: an explicit <|startoftext|>,
// the system turn, ChatML turns in which assistant replies before the last user turn lose everything up to
// their last
// </think> (and <|think|>...<|/think|> spans) and are trimmed, then "<|im_start|>assistant\n<think>".
std::string render_lfm2_fallback(const std::vector<ChatMessage>& messages);

}  // namespace df

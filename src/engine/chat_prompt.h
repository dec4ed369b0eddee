#pragma once
// Chat messages → prompt token ids, as llama-server does it: render the GGUF's own chat template (or, for a
// file without one, the LFM2.5 rendering of the seed), strip a leading BOS text when the vocabulary adds BOS
// itself, and tokenize with special tokens parsed.
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace df {

struct ChatPrompt {
  std::string text;  // the rendered prompt (after the BOS strip)
  std::vector<int32_t> ids;
  bool opens_reasoning = false;  // the generation prompt ends inside a <think> block
  // The generation prompt opens a harmony message (gpt-oss: "<|start|>assistant"): the reply's channels say
  // what is reasoning.
  bool harmony = false;
  // The generation prompt opens a Gemma 4 model turn ("<|turn>model", or its empty thought channel when
  // thinking is off): a <|channel>thought ... <channel|> section of the reply is reasoning.
  bool gemma_channels = false;
};

// One model's prompt builder: the template is parsed once (a chat renders it every turn). `tokenizer` must
// outlive the builder.
class ChatPromptBuilder {
 public:
  // Throws df::Error naming the line and column of a template syntax error. No template (or an empty one):
  // the LFM2.5 fallback rendering.
  ChatPromptBuilder(const tok::Tokenizer& tokenizer, const std::optional<std::string>& chat_template);

  ChatPrompt build(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;

 private:
  const tok::Tokenizer& tokenizer_;
  std::optional<ChatTemplate> template_;
  std::string bos_text_;
  ChatOptions options_;  // add_generation_prompt is set per call
};

// A builder for one prompt.
ChatPrompt build_chat_prompt(const tok::Tokenizer& tokenizer, const std::optional<std::string>& chat_template,
                             const std::vector<ChatMessage>& messages, bool add_generation_prompt = true);

}  // namespace df

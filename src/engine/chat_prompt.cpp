#include "engine/chat_prompt.h"

#include "util/error.h"

namespace df {

ChatPromptBuilder::ChatPromptBuilder(const tok::Tokenizer& tokenizer,
                                     const std::optional<std::string>& chat_template)
    : tokenizer_(tokenizer) {
  const bool has_bos = tokenizer.bos() != tok::kNoToken, has_eos = tokenizer.eos() != tok::kNoToken;
  bos_text_ = has_bos ? tokenizer.token_text(tokenizer.bos()) : std::string();
  if (chat_template && !chat_template->empty()) {
    template_.emplace(*chat_template);
    options_.bos_token = bos_text_;
    options_.eos_token = has_eos ? tokenizer.token_text(tokenizer.eos()) : std::string();
    options_.strip_leading_bos = tokenizer.add_bos();
    options_.strip_trailing_eos = tokenizer.add_eos();
  }
}

ChatPrompt ChatPromptBuilder::build(const std::vector<ChatMessage>& messages,
                                    bool add_generation_prompt) const {
  if (messages.empty()) fail("a chat needs at least one message");
  ChatPrompt p;
  if (template_) {
    ChatOptions o = options_;
    o.add_generation_prompt = add_generation_prompt;
    p.text = template_->render(messages, o);
  } else {
    // The seed's LFM2.5 rendering writes <|startoftext|> itself: drop it when the tokenizer adds BOS anyway,
    // so that the prompt starts with exactly one BOS either way.
    p.text = render_lfm2_fallback(messages);
    if (tokenizer_.add_bos() && !bos_text_.empty() && p.text.rfind(bos_text_, 0) == 0)
      p.text.erase(0, bos_text_.size());
  }
  p.ids = tokenizer_.encode(p.text, /*add_special=*/true, /*parse_special=*/true);
  std::string_view tail(p.text);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.remove_suffix(1);
  p.opens_reasoning = tail.ends_with("<think>");
  p.harmony = tail.ends_with("<|start|>assistant");
  p.gemma_channels =
      tail.ends_with("<|turn>model") || tail.ends_with("<|turn>model\n<|channel>thought\n<channel|>");
  return p;
}

ChatPrompt build_chat_prompt(const tok::Tokenizer& tokenizer, const std::optional<std::string>& chat_template,
                             const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  return ChatPromptBuilder(tokenizer, chat_template).build(messages, add_generation_prompt);
}

}  // namespace df

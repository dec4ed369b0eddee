#include "engine/chat_prompt.h"

#include "util/error.h"

namespace df {

ChatPrompt build_chat_prompt(const tok::Tokenizer& tokenizer, const std::optional<std::string>& chat_template,
                             const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  if (messages.empty()) fail("a chat needs at least one message");
  const bool has_bos = tokenizer.bos() != tok::kNoToken, has_eos = tokenizer.eos() != tok::kNoToken;
  const std::string bos_text = has_bos ? tokenizer.token_text(tokenizer.bos()) : std::string();
  ChatPrompt p;
  if (chat_template && !chat_template->empty()) {
    ChatOptions o;
    o.add_generation_prompt = add_generation_prompt;
    o.bos_token = bos_text;
    o.eos_token = has_eos ? tokenizer.token_text(tokenizer.eos()) : std::string();
    o.strip_leading_bos = tokenizer.add_bos();
    o.strip_trailing_eos = tokenizer.add_eos();
    p.text = render_chat(*chat_template, messages, o);
  } else {
    // The seed's LFM2.5 rendering writes <|startoftext|> itself: drop it when the tokenizer adds BOS anyway, so
    // that the prompt starts with exactly one BOS either way.
    p.text = render_lfm2_fallback(messages);
    if (tokenizer.add_bos() && !bos_text.empty() && p.text.rfind(bos_text, 0) == 0) p.text.erase(0, bos_text.size());
  }
  p.ids = tokenizer.encode(p.text, /*add_special=*/true, /*parse_special=*/true);
  std::string_view tail(p.text);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.remove_suffix(1);
  p.opens_reasoning = tail.size() >= 7 && tail.substr(tail.size() - 7) == "<think>";
  return p;
}

}  // namespace df

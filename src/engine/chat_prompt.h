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
  std::string text;             // the rendered prompt (after the BOS strip)
  std::vector<int32_t> ids;
  bool opens_reasoning = false; // the generation prompt ends inside a <think> block
};

ChatPrompt build_chat_prompt(const tok::Tokenizer& tokenizer, const std::optional<std::string>& chat_template,
                             const std::vector<ChatMessage>& messages, bool add_generation_prompt = true);

}  // namespace df

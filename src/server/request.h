#pragma once
// A generation request as the scheduler runs it, and the parsers that build one from the JSON bodies of
// /v1/chat/completions and /v1/completions: every field is checked for its type and range, and anything
// wrong is an ApiError(400) naming the field.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/chat_prompt.h"
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

namespace df::server {

enum class RequestKind { Chat, Completion };

struct GenRequest {
  RequestKind kind = RequestKind::Completion;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = -1;  // < 0: until the context ends
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool logprobs = false;
  int top_logprobs = 0;
  bool stream = false;
  bool include_usage = false;    // stream_options.include_usage
  bool opens_reasoning = false;  // the chat prompt ends inside a think block
  bool harmony = false;          // the reply is harmony messages (gpt-oss): its analysis channel is reasoning
  bool gemma_channels = false;   // the reply may open Gemma 4's thought channel: that is reasoning
  bool extract_reasoning = true;  // chat: think blocks go to reasoning_content
  std::string model;              // as the client named it (echoed back)
};

struct ParseContext {
  const tok::Tokenizer& tokenizer;
  const ChatPromptBuilder& prompts;
  int n_ctx;
  SamplingParams defaults;        // the server's sampling flags
  bool extract_reasoning = true;  // --reasoning-format (none: false)
};

// The request's body as JSON (an object), or ApiError(400) saying where it is malformed.
nlohmann::json parse_body(const std::string& body);

// The messages of a chat request (roles system, developer, user, assistant, tool; content a string, null or
// a list of text parts).
std::vector<ChatMessage> parse_messages(const nlohmann::json& body);

GenRequest parse_chat_request(const nlohmann::json& body, const ParseContext& ctx);
GenRequest parse_completion_request(const nlohmann::json& body, const ParseContext& ctx);

// A prompt given as text or as token ids (checked against the vocabulary), for /v1/completions and
// /tokenize-like uses.
std::vector<int32_t> parse_prompt(const nlohmann::json& prompt, const tok::Tokenizer& tokenizer,
                                  const char* field);

}  // namespace df::server

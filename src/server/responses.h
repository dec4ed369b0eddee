#pragma once
// The JSON the API answers with, in OpenAI's shapes (llama.cpp's server's extra fields where OpenAI leaves
// room: timings, reasoning_content).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/job.h"
#include "tokenizer/tokenizer.h"

namespace df::server {

struct ResponseMeta {
  std::string id, model;
  int64_t created = 0;
};

nlohmann::json usage_json(const Outcome& o);
nlohmann::json timings_json(const Outcome& o);

// A whole (non-streamed) answer: the deltas concatenated.
nlohmann::json chat_completion(const ResponseMeta& meta, const std::vector<Delta>& deltas, const Outcome& o,
                               bool logprobs, const tok::Tokenizer& tokenizer);
nlohmann::json text_completion(const ResponseMeta& meta, const std::vector<Delta>& deltas, const Outcome& o,
                               bool logprobs, const tok::Tokenizer& tokenizer);

// Streamed pieces. `delta` null: the role chunk that opens a chat stream.
nlohmann::json chat_chunk(const ResponseMeta& meta, const Delta* delta, bool logprobs,
                          const tok::Tokenizer& tokenizer);
nlohmann::json chat_final_chunk(const ResponseMeta& meta, const Outcome& o);
nlohmann::json text_chunk(const ResponseMeta& meta, const Delta& delta, bool logprobs,
                          const tok::Tokenizer& tokenizer);
nlohmann::json text_final_chunk(const ResponseMeta& meta, const Outcome& o);
// The usage chunk of stream_options.include_usage (no choices).
nlohmann::json usage_chunk(const ResponseMeta& meta, const char* object, const Outcome& o);

// JSON text for the wire: bytes that are not UTF-8 (a token piece may be half a character) become U+FFFD.
std::string dump(const nlohmann::json& j);
// One server-sent event: "data: JSON\n\n".
std::string sse(const nlohmann::json& j);

}  // namespace df::server

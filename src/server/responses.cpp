#include "server/responses.h"

namespace df::server {
namespace {

using nlohmann::json;

json bytes_of(std::string_view s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

std::string piece(const tok::Tokenizer& t, int32_t id) { return std::string(t.token_to_piece(id, true)); }

// OpenAI's chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]}.
json chat_logprobs(const std::vector<Delta>& deltas, const tok::Tokenizer& t) {
  json content = json::array();
  for (const Delta& d : deltas)
    for (const TokenLogprob& lp : d.logprobs) {
      json top = json::array();
      for (const auto& [id, l] : lp.top) {
        const std::string p = piece(t, id);
        top.push_back({{"id", id}, {"token", p}, {"logprob", l}, {"bytes", bytes_of(p)}});
      }
      const std::string p = piece(t, lp.token);
      content.push_back({{"id", lp.token},
                         {"token", p},
                         {"logprob", lp.logprob},
                         {"bytes", bytes_of(p)},
                         {"top_logprobs", top}});
    }
  return {{"content", content}};
}

// The legacy completions logprobs: parallel lists.
json text_logprobs(const std::vector<Delta>& deltas, const tok::Tokenizer& t) {
  json tokens = json::array(), lps = json::array(), tops = json::array();
  for (const Delta& d : deltas)
    for (const TokenLogprob& lp : d.logprobs) {
      tokens.push_back(piece(t, lp.token));
      lps.push_back(lp.logprob);
      json top = json::object();
      for (const auto& [id, l] : lp.top) top[piece(t, id)] = l;
      tops.push_back(top);
    }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}};
}

json finish_reason(const Outcome& o) {
  return o.finish_reason.empty() ? json(nullptr) : json(o.finish_reason);
}

}  // namespace

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

json usage_json(const Outcome& o) {
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", o.completion_tokens},
          {"total_tokens", o.prompt_tokens + o.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

json timings_json(const Outcome& o) {
  const int prompt_n = o.prompt_tokens - o.cached_tokens;
  const int predicted_n = o.completion_tokens;
  auto per_token = [](double ms, int n) { return n > 0 ? ms / n : 0.0; };
  auto per_second = [](double ms, int n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
  return {{"cache_n", o.cached_tokens},
          {"prompt_n", prompt_n},
          {"prompt_ms", o.prompt_ms},
          {"prompt_per_token_ms", per_token(o.prompt_ms, prompt_n)},
          {"prompt_per_second", per_second(o.prompt_ms, prompt_n)},
          {"predicted_n", predicted_n},
          {"predicted_ms", o.predicted_ms},
          {"predicted_per_token_ms", per_token(o.predicted_ms, predicted_n)},
          {"predicted_per_second", per_second(o.predicted_ms, predicted_n)}};
}

json chat_completion(const ResponseMeta& meta, const std::vector<Delta>& deltas, const Outcome& o,
                     bool logprobs, const tok::Tokenizer& tokenizer) {
  std::string content, reasoning;
  for (const Delta& d : deltas) {
    content += d.content;
    reasoning += d.reasoning;
  }
  json message = {{"role", "assistant"}, {"content", content}};
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  json choice = {{"index", 0},
                 {"message", message},
                 {"logprobs", logprobs ? chat_logprobs(deltas, tokenizer) : json(nullptr)},
                 {"finish_reason", finish_reason(o)}};
  return {{"id", meta.id},
          {"object", "chat.completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})},
          {"usage", usage_json(o)},
          {"timings", timings_json(o)}};
}

json text_completion(const ResponseMeta& meta, const std::vector<Delta>& deltas, const Outcome& o,
                     bool logprobs, const tok::Tokenizer& tokenizer) {
  std::string text;
  for (const Delta& d : deltas) text += d.content + d.reasoning;
  json choice = {{"index", 0},
                 {"text", text},
                 {"logprobs", logprobs ? text_logprobs(deltas, tokenizer) : json(nullptr)},
                 {"finish_reason", finish_reason(o)}};
  return {{"id", meta.id},
          {"object", "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})},
          {"usage", usage_json(o)},
          {"timings", timings_json(o)}};
}

json chat_chunk(const ResponseMeta& meta, const Delta* delta, bool logprobs,
                const tok::Tokenizer& tokenizer) {
  json d = json::object();
  json lp = nullptr;
  if (!delta) {
    d = {{"role", "assistant"}, {"content", nullptr}};
  } else {
    if (!delta->content.empty()) d["content"] = delta->content;
    if (!delta->reasoning.empty()) d["reasoning_content"] = delta->reasoning;
    if (logprobs) lp = chat_logprobs({*delta}, tokenizer);
  }
  json choice = {{"index", 0}, {"delta", d}, {"logprobs", lp}, {"finish_reason", nullptr}};
  return {{"id", meta.id},
          {"object", "chat.completion.chunk"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})}};
}

json chat_final_chunk(const ResponseMeta& meta, const Outcome& o) {
  json choice = {
      {"index", 0}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", finish_reason(o)}};
  return {{"id", meta.id},       {"object", "chat.completion.chunk"}, {"created", meta.created},
          {"model", meta.model}, {"choices", json::array({choice})},  {"timings", timings_json(o)}};
}

json text_chunk(const ResponseMeta& meta, const Delta& delta, bool logprobs,
                const tok::Tokenizer& tokenizer) {
  json choice = {{"index", 0},
                 {"text", delta.content + delta.reasoning},
                 {"logprobs", logprobs ? text_logprobs({delta}, tokenizer) : json(nullptr)},
                 {"finish_reason", nullptr}};
  return {{"id", meta.id},
          {"object", "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})}};
}

json text_final_chunk(const ResponseMeta& meta, const Outcome& o) {
  json choice = {{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish_reason(o)}};
  return {{"id", meta.id},       {"object", "text_completion"},      {"created", meta.created},
          {"model", meta.model}, {"choices", json::array({choice})}, {"timings", timings_json(o)}};
}

json usage_chunk(const ResponseMeta& meta, const char* object, const Outcome& o) {
  return {{"id", meta.id},       {"object", object},         {"created", meta.created},
          {"model", meta.model}, {"choices", json::array()}, {"usage", usage_json(o)}};
}

}  // namespace df::server

#include "server/request.h"

#include <cmath>
#include <limits>

#include "server/api_error.h"
#include "util/error.h"

namespace df::server {
namespace {

using nlohmann::json;

const char* type_name(const json& v) { return v.type_name(); }

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number(const json& body, const char* name, double lo, double hi, double def) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number()) bad_request("'{}' must be a number, not {}", name, type_name(*v));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) bad_request("'{}' is {} but must be in [{}, {}]", name, x, lo, hi);
  return x;
}

int64_t integer(const json& body, const char* name, int64_t lo, int64_t hi, int64_t def) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number()) bad_request("'{}' must be an integer, not {}", name, type_name(*v));
  // 3.0 is taken as 3 (JavaScript clients send whole numbers as doubles); range first, then the cast.
  const double x = v->get<double>();
  if (!std::isfinite(x) || x != std::floor(x)) bad_request("'{}' must be an integer, not a fraction", name);
  if (!(x >= static_cast<double>(lo) && x <= static_cast<double>(hi)))
    bad_request("'{}' is {} but must be in [{}, {}]", name, x, lo, hi);
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
      bad_request("'{}' is {} but must be in [{}, {}]", name, v->get<uint64_t>(), lo, hi);
    const int64_t i = v->is_number_unsigned() ? static_cast<int64_t>(v->get<uint64_t>()) : v->get<int64_t>();
    if (i < lo || i > hi) bad_request("'{}' is {} but must be in [{}, {}]", name, i, lo, hi);
    return i;
  }
  return static_cast<int64_t>(x);
}

bool boolean(const json& body, const char* name, bool def) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_boolean()) bad_request("'{}' must be true or false, not {}", name, type_name(*v));
  return v->get<bool>();
}

// The fields both endpoints share: sampling, limits, stop strings, logprobs, streaming.
void parse_common(const json& body, const ParseContext& ctx, GenRequest& r, bool chat) {
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) bad_request("'model' must be a string, not {}", type_name(*m));
    r.model = m->get<std::string>();
  }
  SamplingParams& s = r.sampling;
  s = ctx.defaults;
  s.temperature = static_cast<float>(number(body, "temperature", 0, 100, s.temperature));
  s.top_p = static_cast<float>(number(body, "top_p", 0, 1, s.top_p));
  if (s.top_p <= 0) bad_request("'top_p' must be above 0");
  s.top_k = static_cast<int>(integer(body, "top_k", 0, std::numeric_limits<int32_t>::max(), s.top_k));
  s.min_p = static_cast<float>(number(body, "min_p", 0, 1, s.min_p));
  s.repeat_penalty = static_cast<float>(number(body, "repeat_penalty", 0, 100, s.repeat_penalty));
  if (s.repeat_penalty <= 0) bad_request("'repeat_penalty' must be above 0");
  s.repeat_last_n = static_cast<int>(integer(body, "repeat_last_n", 0, 1 << 20, s.repeat_last_n));
  s.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2, 2, s.presence_penalty));
  s.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2, 2, s.frequency_penalty));
  if (const json* seed = field(body, "seed")) {  // any 64-bit integer (-1 too: a seed like any other)
    if (seed->is_number_unsigned())
      s.seed = seed->get<uint64_t>();
    else if (seed->is_number_integer())
      s.seed = static_cast<uint64_t>(seed->get<int64_t>());
    else
      bad_request("'seed' must be an integer, not {}", seed->is_number() ? "a fraction" : type_name(*seed));
  }
  const int64_t max_int = std::numeric_limits<int32_t>::max();
  int64_t max_tokens = integer(body, "max_tokens", -1, max_int, -1);
  if (chat) max_tokens = integer(body, "max_completion_tokens", -1, max_int, max_tokens);
  max_tokens = integer(body, "n_predict", -1, max_int, max_tokens);  // llama.cpp's name
  r.max_tokens = static_cast<int>(max_tokens);
  if (const json* n = field(body, "n"); n && !(n->is_number_integer() && n->get<int64_t>() == 1))
    bad_request("'n' must be 1: one choice per request is supported");
  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 16) bad_request("'stop' has {} strings; at most 16 are allowed", stop->size());
      for (const auto& x : *stop) {
        if (!x.is_string())
          bad_request("'stop' must be a string or a list of strings, not a list with {}", type_name(x));
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad_request("'stop' must be a string or a list of strings, not {}", type_name(*stop));
    }
  }
  r.ignore_eos = boolean(body, "ignore_eos", false);
  r.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_request("'stream_options' must be an object, not {}", type_name(*so));
    r.include_usage = boolean(*so, "include_usage", false);
  }
  if (const json* lp = field(body, "logprobs")) {
    if (chat) {
      r.logprobs = boolean(body, "logprobs", false);
      r.top_logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 20, 0));
      if (r.top_logprobs > 0 && !r.logprobs) bad_request("'top_logprobs' needs 'logprobs': true");
    } else {  // the legacy completions API: logprobs is the number of alternatives
      if (lp->is_boolean()) {
        r.logprobs = lp->get<bool>();
      } else {
        r.top_logprobs = static_cast<int>(integer(body, "logprobs", 0, 20, 0));
        r.logprobs = true;
      }
    }
  } else if (field(body, "top_logprobs")) {
    bad_request("'top_logprobs' needs 'logprobs': true");
  }
}

void check_fits(const GenRequest& r, const ParseContext& ctx) {
  if (r.prompt.empty()) bad_request("the prompt is empty");
  if (static_cast<int>(r.prompt.size()) >= ctx.n_ctx)
    bad_request(
        "the prompt is {} tokens but the context holds {}: shorten it (or start the server with a larger -c)",
        r.prompt.size(), ctx.n_ctx);
}

}  // namespace

json parse_body(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    bad_request("the body is not valid JSON: {}", e.what());
  }
  if (!j.is_object()) bad_request("the body must be a JSON object, not {}", type_name(j));
  return j;
}

std::vector<ChatMessage> parse_messages(const json& body) {
  const json* msgs = field(body, "messages");
  if (!msgs) bad_request("'messages' is missing: a chat request needs a list of messages");
  if (!msgs->is_array()) bad_request("'messages' must be a list, not {}", type_name(*msgs));
  if (msgs->empty()) bad_request("'messages' is empty: a chat needs at least one message");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    if (!m.is_object()) bad_request("messages[{}] must be an object, not {}", i, type_name(m));
    const json* role = field(m, "role");
    if (!role || !role->is_string()) bad_request("messages[{}].role must be a string", i);
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      bad_request("messages[{}].role '{}' is unknown: use system, developer, user, assistant or tool", i, r);
    ChatMessage cm{r, ""};
    if (const json* c = field(m, "content")) {
      if (c->is_string()) {
        cm.content = c->get<std::string>();
      } else if (c->is_array()) {
        for (size_t k = 0; k < c->size(); ++k) {
          const json& part = (*c)[k];
          const json* type = part.is_object() ? field(part, "type") : nullptr;
          if (!type || !type->is_string() || type->get<std::string>() != "text")
            bad_request(
                "messages[{}].content[{}] must be a text part ({{\"type\": \"text\", \"text\": ...}})", i, k);
          const json* text = field(part, "text");
          if (!text || !text->is_string())
            bad_request("messages[{}].content[{}].text must be a string", i, k);
          cm.content += text->get<std::string>();
        }
      } else {
        bad_request("messages[{}].content must be a string or a list of text parts, not {}", i,
                    type_name(*c));
      }
    } else if (r != "assistant") {
      bad_request("messages[{}].content is missing", i);
    }
    if (const json* rc = field(m, "reasoning_content")) {
      if (!rc->is_string()) bad_request("messages[{}].reasoning_content must be a string", i);
      cm.reasoning_content = rc->get<std::string>();
    }
    out.push_back(std::move(cm));
  }
  return out;
}

std::vector<int32_t> parse_prompt(const json& prompt, const tok::Tokenizer& tokenizer, const char* name) {
  const json* p = &prompt;
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];  // a batch of one
  if (p->is_string())
    return tokenizer.encode(p->get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
  if (!p->is_array())
    bad_request("'{}' must be a string or a list of token ids, not {}", name, type_name(*p));
  std::vector<int32_t> ids;
  const int64_t n_vocab = static_cast<int64_t>(tokenizer.n_vocab());
  for (size_t i = 0; i < p->size(); ++i) {
    const json& t = (*p)[i];
    if (!t.is_number_integer())
      bad_request("'{}'[{}] must be a token id (an integer), not {}", name, i, type_name(t));
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= n_vocab)
      bad_request("'{}'[{}] = {} is outside the vocabulary (0..{})", name, i, id, n_vocab - 1);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

GenRequest parse_chat_request(const json& body, const ParseContext& ctx) {
  GenRequest r;
  r.kind = RequestKind::Chat;
  const std::vector<ChatMessage> messages = parse_messages(body);
  parse_common(body, ctx, r, /*chat=*/true);
  if (const json* rf = field(body, "reasoning_format")) {
    if (!rf->is_string()) bad_request("'reasoning_format' must be a string");
    const std::string f = rf->get<std::string>();
    if (f != "none" && f != "auto" && f != "deepseek")
      bad_request("'reasoning_format' '{}' is unknown: none, auto or deepseek", f);
    r.extract_reasoning = f != "none";
  } else {
    r.extract_reasoning = ctx.extract_reasoning;
  }
  ChatPrompt cp;
  try {
    cp = ctx.prompts.build(messages);
  } catch (const Error& e) {
    bad_request("the chat template could not render these messages: {}", e.what());
  }
  r.prompt = std::move(cp.ids);
  r.opens_reasoning = cp.opens_reasoning;
  r.harmony = cp.harmony;
  r.gemma_channels = cp.gemma_channels;
  check_fits(r, ctx);
  return r;
}

GenRequest parse_completion_request(const json& body, const ParseContext& ctx) {
  GenRequest r;
  r.kind = RequestKind::Completion;
  const json* prompt = field(body, "prompt");
  if (!prompt) bad_request("'prompt' is missing: give the text (or token ids) to complete");
  r.prompt = parse_prompt(*prompt, ctx.tokenizer, "prompt");
  parse_common(body, ctx, r, /*chat=*/false);
  r.extract_reasoning = false;
  check_fits(r, ctx);
  return r;
}

}  // namespace df::server

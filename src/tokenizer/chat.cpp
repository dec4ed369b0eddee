#include "tokenizer/chat.h"

#include <ctime>

#include "util/error.h"

namespace df {
namespace {

std::string format_local_time(std::time_t t, const char* format) {
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  const size_t n = std::strftime(buf, sizeof buf, format, &tm);
  return std::string(buf, n);
}

// llama.cpp's capability probe: a template supports the system role when a system message's text shows up in
// its output (a template that raises, or drops it, does not).
bool probe_system_role(const jinja::Template& tmpl) {
  static constexpr const char* kNeedle = "<System Needle>";
  const nlohmann::ordered_json context = {
      {"messages", {{{"role", "system"}, {"content", kNeedle}}, {{"role", "user"}, {"content", "Hey"}}}},
      {"bos_token", ""},
      {"eos_token", ""},
      {"add_generation_prompt", false},
  };
  try {
    return tmpl.render(context).find(kNeedle) != std::string::npos;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source)
    : template_(source, "chat template"),
      supports_system_role_(probe_system_role(template_)),
      maps_developer_to_system_(template_.source().find("<|channel|>") == std::string::npos) {}

nlohmann::ordered_json chat_template_context(const std::vector<ChatMessage>& messages,
                                             const ChatOptions& options) {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
    if (m.reasoning_content) j["reasoning_content"] = *m.reasoning_content;
    msgs.push_back(std::move(j));
  }
  const std::time_t now = options.render.now ? *options.render.now : std::time(nullptr);
  nlohmann::ordered_json context = {
      {"messages", std::move(msgs)},
      {"bos_token", options.bos_token},
      {"eos_token", options.eos_token},
      {"add_generation_prompt", options.add_generation_prompt},
      {"enable_thinking", options.enable_thinking},
      {"date_string", format_local_time(now, "%d %b %Y")},
      {"datetime", format_local_time(now, "%b %d %Y")},
  };
  if (options.extra_context.is_object()) {
    for (auto it = options.extra_context.begin(); it != options.extra_context.end(); ++it)
      context[it.key()] = it.value();
  }
  return context;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatOptions& options) const {
  std::vector<ChatMessage> msgs = messages;
  if (maps_developer_to_system_) {
    for (ChatMessage& m : msgs) {
      if (m.role == "developer") m.role = "system";
    }
  }
  if (!supports_system_role_ && !msgs.empty() && msgs.front().role == "system") {
    if (msgs.size() > 1) msgs[1].content = msgs[0].content + "\n" + msgs[1].content;
    msgs.erase(msgs.begin());
  }
  std::string prompt = template_.render(chat_template_context(msgs, options), options.render);
  const std::string& bos = options.bos_token;
  const std::string& eos = options.eos_token;
  if (options.strip_leading_bos && !bos.empty() && prompt.compare(0, bos.size(), bos) == 0)
    prompt.erase(0, bos.size());
  if (options.strip_trailing_eos && !eos.empty() && prompt.size() >= eos.size() &&
      prompt.compare(prompt.size() - eos.size(), eos.size(), eos) == 0) {
    prompt.resize(prompt.size() - eos.size());
  }
  return prompt;
}

std::string render_chat(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                        const ChatOptions& options) {
  return ChatTemplate(tmpl).render(messages, options);
}

}  // namespace df

// The reference engine's lfm2ChatPrompt() (seed), byte for byte.
#include <string>
#include <string_view>

#include "tokenizer/chat.h"

namespace df {
namespace {

// The code point at s[i] and its length when it is one that JavaScript's String.prototype.trim() removes
// (ECMAScript WhiteSpace and LineTerminator); 0 otherwise.
size_t js_space_length_at(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 == ' ' || (b0 >= 0x09 && b0 <= 0x0D)) return 1;
  if (b0 < 0xC2) return 0;
  auto byte = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
  if (b0 == 0xC2 && byte(1) == 0xA0) return 2;                     // U+00A0
  if (b0 == 0xE1 && byte(1) == 0x9A && byte(2) == 0x80) return 3;  // U+1680
  if (b0 == 0xE2 && byte(1) == 0x80) {                             // U+2000-200A, U+2028, U+2029, U+202F
    const unsigned b2 = byte(2);
    return (b2 >= 0x80 && b2 <= 0x8A) || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF ? 3 : 0;
  }
  if (b0 == 0xE2 && byte(1) == 0x81 && byte(2) == 0x9F) return 3;  // U+205F
  if (b0 == 0xE3 && byte(1) == 0x80 && byte(2) == 0x80) return 3;  // U+3000
  if (b0 == 0xEF && byte(1) == 0xBB && byte(2) == 0xBF) return 3;  // U+FEFF
  return 0;
}

std::string js_trim(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const size_t n = js_space_length_at(s, begin);
    if (n == 0) break;
    begin += n;
  }
  // Walk forward to find where the trailing run of spaces starts (UTF-8 cannot be scanned backwards by
  // length).
  size_t end = begin;
  size_t i = begin;
  while (i < s.size()) {
    const size_t n = js_space_length_at(s, i);
    if (n == 0) {
      ++i;
      end = i;
      while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) end = ++i;
    } else {
      i += n;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

// The seed's c.replace(/<\|think\|>[\s\S]*?<\|\/think\|>/g, ''): each opener up to the nearest closer.
std::string remove_think_spans(std::string c) {
  static constexpr std::string_view kOpen = "<|think|>";
  static constexpr std::string_view kClose = "<|/think|>";
  size_t from = 0;
  while (true) {
    const size_t open = c.find(kOpen, from);
    if (open == std::string::npos) break;
    const size_t close = c.find(kClose, open + kOpen.size());
    if (close == std::string::npos) break;
    c.erase(open, close + kClose.size() - open);
    from = open;
  }
  return c;
}

}  // namespace

std::string render_lfm2_fallback(const std::vector<ChatMessage>& messages) {
  std::string s = "<|startoftext|>";
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    if (!messages[0].content.empty()) s += "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n";
    first = 1;
  }
  std::ptrdiff_t last_user = -1;
  for (size_t i = first; i < messages.size(); ++i) {
    if (messages[i].role == "user") last_user = static_cast<std::ptrdiff_t>(i);
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    std::string c = m.content;
    if (m.role == "assistant" && static_cast<std::ptrdiff_t>(i) < last_user) {
      c = remove_think_spans(std::move(c));
      const size_t end_think = c.rfind("</think>");
      if (end_think != std::string::npos) c.erase(0, end_think + std::string_view("</think>").size());
      c = js_trim(c);
    }
    s += "<|im_start|>" + m.role + "\n" + c + "<|im_end|>\n";
  }
  return s + "<|im_start|>assistant\n<think>";
}

}  // namespace df

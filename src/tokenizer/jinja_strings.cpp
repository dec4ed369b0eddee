#include "tokenizer/jinja_strings.h"

#include <algorithm>

namespace df::jinja {
namespace {

size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Length of the code point at s[i], or 1 for a byte that does not start a complete sequence.
size_t char_length_at(std::string_view s, size_t i) {
  const size_t n = utf8_sequence_length(static_cast<unsigned char>(s[i]));
  if (n == 1 || i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

bool is_ascii_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char to_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }
char to_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
// Non-ASCII bytes count as letters: most non-ASCII text is letters, and their case is left alone.
bool is_cased(unsigned char c) { return is_ascii_alpha(c) || c >= 0x80; }

}  // namespace

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = char_length_at(s, i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t utf8_length(std::string_view s) { return utf8_index_of_byte(s, s.size()); }

size_t utf8_index_of_byte(std::string_view s, size_t byte_offset) {
  size_t count = 0;
  for (size_t i = 0; i < s.size() && i < byte_offset; i += char_length_at(s, i)) ++count;
  return count;
}

std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = to_upper(c);
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = to_lower(c);
  return out;
}

std::string python_capitalize(std::string_view s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = to_upper(out[0]);
  return out;
}

std::string python_title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (is_ascii_alpha(u)) c = previous_cased ? to_lower(c) : to_upper(c);
    previous_cased = is_cased(u);
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  std::string out(s);
  auto is_separator = [](char c) {
    return is_ascii_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  bool word_start = true;
  for (char& c : out) {
    if (is_separator(c)) {
      word_start = true;
      continue;
    }
    c = word_start ? to_upper(c) : to_lower(c);
    word_start = false;
  }
  return out;
}

std::string python_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<std::string_view> cps = utf8_chars(s);
  std::vector<std::string_view> set;
  if (chars) set = utf8_chars(*chars);
  auto removable = [&](std::string_view cp) {
    if (!chars) return cp.size() == 1 && is_ascii_space(cp[0]);
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t begin = 0;
  size_t end = cps.size();
  if (left) {
    while (begin < end && removable(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && removable(cps[end - 1])) --end;
  }
  std::string out;
  for (size_t i = begin; i < end; ++i) out += cps[i];
  return out;
}

std::vector<std::string> python_split(std::string_view s, const std::optional<std::string>& sep,
                                      int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t start = 0;
    while (maxsplit != 0) {
      const size_t hit = s.find(*sep, start);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(start, hit - start));
      start = hit + sep->size();
      --maxsplit;
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  size_t i = 0;
  while (true) {
    while (i < s.size() && is_ascii_space(s[i])) ++i;
    if (i >= s.size()) break;
    if (maxsplit == 0) {
      out.emplace_back(s.substr(i));
      break;
    }
    size_t j = i;
    while (j < s.size() && !is_ascii_space(s[j])) ++j;
    out.emplace_back(s.substr(i, j - i));
    --maxsplit;
    i = j;
  }
  return out;
}

std::vector<std::string> python_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                       int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (maxsplit != 0 && end >= sep->size()) {
      const size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
      --maxsplit;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  size_t end = s.size();
  while (true) {
    while (end > 0 && is_ascii_space(s[end - 1])) --end;
    if (end == 0) break;
    if (maxsplit == 0) {
      out.emplace_back(s.substr(0, end));
      break;
    }
    size_t j = end;
    while (j > 0 && !is_ascii_space(s[j - 1])) --j;
    out.emplace_back(s.substr(j, end - j));
    --maxsplit;
    end = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> python_splitlines(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      out.emplace_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string python_replace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                           int64_t count) {
  std::string out;
  if (old_sub.empty()) {
    // Python inserts the replacement between every code point and at both ends.
    const auto cps = utf8_chars(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += new_sub;
      if (i < cps.size()) out += cps[i];
    }
    return out;
  }
  size_t start = 0;
  while (count != 0) {
    const size_t hit = s.find(old_sub, start);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(start, hit - start));
    out.append(new_sub);
    start = hit + old_sub.size();
    --count;
  }
  out.append(s.substr(start));
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace df::jinja

#pragma once
// String operations of the template language with Python's semantics on UTF-8 text: lengths, indices and
// slices count code points; case mapping is ASCII-only (non-ASCII bytes pass through, counted as letters),
// and the default whitespace is ASCII whitespace, as in llama.cpp's engine.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/utf8.h"

namespace df::jinja {

// The text split into code points (invalid bytes stand alone, one per element).
std::vector<std::string_view> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);
// Number of code points that start before byte offset `byte_offset`.
size_t utf8_index_of_byte(std::string_view s, size_t byte_offset);

std::string ascii_upper(std::string_view s);
std::string ascii_lower(std::string_view s);
std::string python_capitalize(std::string_view s);  // str.capitalize and the capitalize filter
std::string python_title(std::string_view s);       // str.title()
std::string jinja_title(std::string_view s);        // the title filter: words split at whitespace and -([{<

// str.strip/lstrip/rstrip; `chars` = the set of code points to remove, nullopt = whitespace.
std::string python_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);

// str.split / str.rsplit; sep nullopt = runs of whitespace with empty pieces dropped. maxsplit < 0 = no
// limit.
std::vector<std::string> python_split(std::string_view s, const std::optional<std::string>& sep,
                                      int64_t maxsplit);
std::vector<std::string> python_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                       int64_t maxsplit);
std::vector<std::string> python_splitlines(std::string_view s);

// str.replace; count < 0 = all.
std::string python_replace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                           int64_t count);

std::string html_escape(std::string_view s);

bool is_ascii_space(char c);

}  // namespace df::jinja

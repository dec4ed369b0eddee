#pragma once
// Argument handling shared by the filters, tests, methods and global functions of the template language.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace df::jinja {

// What str(v) gives in Python: a string as it is, anything else printed.
std::string text_of(const Value& v);
// Integers and booleans (Python's bool is an int).
bool is_integral(const Value& v);
int64_t integral(const Value& v);

// The argument named `name` or at position `pos`; absent, undefined or none gives the fallback. EvalError
// when it has the wrong type.
int64_t int_arg(const CallArgs& a, size_t pos, std::string_view name, int64_t fallback);
bool bool_arg(const CallArgs& a, size_t pos, std::string_view name, bool fallback);
std::optional<std::string> string_arg(const CallArgs& a, size_t pos, std::string_view name);
std::string required_string(const CallArgs& a, size_t pos, std::string_view name);
const Value& required(const CallArgs& a, size_t pos, std::string_view what);

// The items a filter walks: a list's items, a string's characters, a dict's keys; undefined walks nothing.
std::vector<Value> items_of(const Value& v, std::string_view filter);
// item.attribute for the attribute= argument of map, sort, selectattr...: dotted paths and integer indices
// work.
Value attribute_path(const Value& item, const Value& attribute);
// Sorting, min, max and unique compare strings case-insensitively unless case_sensitive is set (Jinja2's
// default).
Value sort_key(const Value& v, bool case_sensitive);

}  // namespace df::jinja

#pragma once
// The library of the template language: filters (x | name), tests (x is name), methods of strings, lists and
// dicts (s.split(), d.items()) and global functions (range, namespace, raise_exception, strftime_now, dict).
#include <string>
#include <string_view>
#include <unordered_map>

#include "tokenizer/jinja_value.h"

namespace df::jinja {

class Renderer;

// Throws EvalError for an unknown filter or bad arguments.
Value apply_filter(Renderer& r, std::string_view name, const Value& input, CallArgs& args);
bool has_filter(std::string_view name);
bool apply_test(Renderer& r, std::string_view name, const Value& input, CallArgs& args);

// The method `name` of a string, list or dict bound to it, or undefined when it has none.
Value bound_method(const Value& receiver, std::string_view name);
// Python's dict attributes, which obj.name finds before a key of the same name (hence templates write
// x['items']).
bool is_dict_method(std::string_view name);

void add_global_functions(std::unordered_map<std::string, Value>& vars);

}  // namespace df::jinja

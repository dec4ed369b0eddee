#include "tokenizer/jinja_builtin_args.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/jinja_strings.h"

namespace df::jinja {

std::string text_of(const Value& v) { return v.is_string() ? v.str() : v.to_output(); }

bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t integral(const Value& v) { return v.is_bool() ? int64_t{v.bool_value()} : v.int_value(); }

int64_t int_arg(const CallArgs& a, size_t pos, std::string_view name, int64_t fallback) {
  const Value v = a.get(pos, name);
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!is_integral(v)) {
    throw EvalError("argument '" + std::string(name) + "' must be an integer, not a " + v.type_name());
  }
  return integral(v);
}

bool bool_arg(const CallArgs& a, size_t pos, std::string_view name, bool fallback) {
  const Value v = a.get(pos, name);
  return v.is_undefined() ? fallback : v.truthy();
}

std::optional<std::string> string_arg(const CallArgs& a, size_t pos, std::string_view name) {
  const Value v = a.get(pos, name);
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) {
    throw EvalError("argument '" + std::string(name) + "' must be a string, not a " + v.type_name());
  }
  return v.str();
}

std::string required_string(const CallArgs& a, size_t pos, std::string_view name) {
  auto s = string_arg(a, pos, name);
  if (!s) throw EvalError("missing string argument '" + std::string(name) + "'");
  return *s;
}

const Value& required(const CallArgs& a, size_t pos, std::string_view what) {
  if (pos >= a.positional.size()) throw EvalError(std::string(what) + " needs more arguments");
  return a.positional[pos];
}

std::vector<Value> items_of(const Value& v, std::string_view filter) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return {};
    case Value::Type::kArray:
      return v.array();
    case Value::Type::kString: {
      std::vector<Value> out;
      for (std::string_view c : utf8_chars(v.str())) out.emplace_back(c);
      return out;
    }
    case Value::Type::kObject: {
      std::vector<Value> out;
      for (const auto& e : v.object().entries()) out.emplace_back(e.first);
      return out;
    }
    default:
      throw EvalError("'" + std::string(filter) + "' needs a list, string or dict, not a " + v.type_name());
  }
}

Value attribute_path(const Value& item, const Value& attribute) {
  if (is_integral(attribute)) {
    if (!item.is_array()) return Value();
    const Array& a = item.array();
    const int64_t i = integral(attribute);
    return i >= 0 && i < static_cast<int64_t>(a.size()) ? a[static_cast<size_t>(i)] : Value();
  }
  if (!attribute.is_string()) throw EvalError("attribute must be a string or an integer");
  Value current = item;
  for (const std::string& part : python_split(attribute.str(), std::string("."), -1)) {
    if (current.is_object()) {
      const Value* v = current.object().find(part);
      current = v ? *v : Value();
    } else if (current.is_array() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const size_t i = std::stoul(part);
      current = i < current.array().size() ? current.array()[i] : Value();
    } else {
      return Value();
    }
  }
  return current;
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (v.is_string() && !case_sensitive) return Value(ascii_lower(v.str()));
  return v;
}

}  // namespace df::jinja

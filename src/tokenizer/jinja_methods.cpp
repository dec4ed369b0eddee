// Methods of strings, lists and dicts (s.split(), l.append(), d.items()) with Python's semantics.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "tokenizer/jinja_builtin_args.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_renderer.h"
#include "tokenizer/jinja_strings.h"

namespace df::jinja {
namespace {

bool matches_affix(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string())
      throw EvalError(std::string("startswith/endswith need strings, not a ") + a.type_name());
    const std::string& x = a.str();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_array()) return std::any_of(affix.array().begin(), affix.array().end(), one);
  return one(affix);
}

Value string_list(const std::vector<std::string>& parts) {
  Array out;
  out.reserve(parts.size());
  for (const std::string& p : parts) out.emplace_back(p);
  return Value::new_array(std::move(out));
}

// str.format with {} / {0} / {name} fields and {{ }} escapes; no format specs.
std::string python_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw EvalError("unmatched '{' in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    bool as_repr = false;
    if (field.size() >= 2 && field[field.size() - 2] == '!') {
      as_repr = field.back() == 'r';
      field.resize(field.size() - 2);
    }
    if (field.find(':') != std::string::npos) throw EvalError("format specs are not supported in str.format");
    Value v;
    if (field.empty()) {
      v = required(a, auto_index++, "str.format");
    } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
      v = required(a, std::stoul(field), "str.format");
    } else {
      const Value* named = a.named_arg(field);
      if (!named) throw EvalError("str.format has no argument named '" + field + "'");
      v = *named;
    }
    out += as_repr ? v.repr() : text_of(v);
    i = close;
  }
  return out;
}

int64_t code_point_find(const std::string& s, const std::string& sub, bool from_right) {
  const size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string::npos) return -1;
  return static_cast<int64_t>(utf8_index_of_byte(s, hit));
}

bool all_chars(const std::string& s, int (*pred)(int)) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; });
}

Value call_string_method(const std::string& name, const std::string& s, CallArgs& a) {
  Renderer* r = a.renderer;
  if (name == "strip") return Value(python_strip(s, string_arg(a, 0, "chars"), true, true));
  if (name == "lstrip") return Value(python_strip(s, string_arg(a, 0, "chars"), true, false));
  if (name == "rstrip") return Value(python_strip(s, string_arg(a, 0, "chars"), false, true));
  if (name == "split" || name == "rsplit") {
    const auto sep = string_arg(a, 0, "sep");
    if (sep && sep->empty()) throw EvalError("empty separator");
    const int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
    auto parts = name == "split" ? python_split(s, sep, maxsplit) : python_rsplit(s, sep, maxsplit);
    if (r) r->check_list_size(parts.size());
    return string_list(parts);
  }
  if (name == "splitlines") return string_list(python_splitlines(s));
  if (name == "startswith") return Value(matches_affix(s, required(a, 0, "startswith"), true));
  if (name == "endswith") return Value(matches_affix(s, required(a, 0, "endswith"), false));
  if (name == "replace") {
    std::string out = python_replace(s, required_string(a, 0, "old"), required_string(a, 1, "new"),
                                     int_arg(a, 2, "count", -1));
    if (r) r->check_string_size(out.size());
    return Value(std::move(out));
  }
  if (name == "upper") return Value(ascii_upper(s));
  if (name == "lower") return Value(ascii_lower(s));
  if (name == "title") return Value(python_title(s));
  if (name == "capitalize") return Value(python_capitalize(s));
  if (name == "find") return Value(code_point_find(s, required_string(a, 0, "sub"), false));
  if (name == "rfind") return Value(code_point_find(s, required_string(a, 0, "sub"), true));
  if (name == "index" || name == "rindex") {
    const int64_t i = code_point_find(s, required_string(a, 0, "sub"), name == "rindex");
    if (i < 0) throw EvalError("substring not found");
    return Value(i);
  }
  if (name == "count") {
    const std::string sub = required_string(a, 0, "sub");
    if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& item : items_of(required(a, 0, "join"), "join")) {
      if (!item.is_string()) throw EvalError(std::string("join needs strings, not a ") + item.type_name());
      if (!first) out += s;
      first = false;
      out += item.str();
      if (r) r->check_string_size(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(python_format(s, a));
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string affix = required_string(a, 0, "affix");
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0)
      return Value(s.substr(affix.size()));
    if (name == "removesuffix" && affix.size() <= s.size() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
      return Value(s.substr(0, s.size() - affix.size()));
    }
    return Value(s);
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return Value(all_chars(s, ::isdigit));
  if (name == "isalpha") return Value(all_chars(s, ::isalpha));
  if (name == "isalnum") return Value(all_chars(s, ::isalnum));
  if (name == "isspace") return Value(all_chars(s, ::isspace));
  if (name == "islower") return Value(s != ascii_upper(s) && s == ascii_lower(s));
  if (name == "isupper") return Value(s != ascii_lower(s) && s == ascii_upper(s));
  throw EvalError("strings have no method '" + name + "'");
}

constexpr std::string_view kStringMethods[] = {
    "strip",     "lstrip",  "rstrip",  "split",   "rsplit",       "splitlines",   "startswith", "endswith",
    "replace",   "upper",   "lower",   "title",   "capitalize",   "find",         "rfind",      "index",
    "rindex",    "count",   "join",    "format",  "removeprefix", "removesuffix", "isdigit",    "isnumeric",
    "isdecimal", "isalpha", "isalnum", "isspace", "islower",      "isupper"};

Value call_list_method(const std::string& name, const ArrayPtr& list, CallArgs& a) {
  Array& items = *list;
  if (name == "append") {
    if (a.renderer) a.renderer->check_list_size(items.size() + 1);
    items.push_back(required(a, 0, "append"));
    return Value::none();
  }
  if (name == "extend") {
    const std::vector<Value> more = items_of(required(a, 0, "extend"), "extend");
    if (a.renderer) a.renderer->check_list_size(items.size() + more.size());
    items.insert(items.end(), more.begin(), more.end());
    return Value::none();
  }
  if (name == "insert") {
    int64_t i = int_arg(a, 0, "index", 0);
    const int64_t n = static_cast<int64_t>(items.size());
    if (i < 0) i = std::max<int64_t>(0, i + n);
    i = std::min(i, n);
    if (a.renderer) a.renderer->check_list_size(items.size() + 1);
    items.insert(items.begin() + i, required(a, 1, "insert"));
    return Value::none();
  }
  if (name == "pop") {
    if (items.empty()) throw EvalError("pop from an empty list");
    int64_t i = int_arg(a, 0, "index", -1);
    const int64_t n = static_cast<int64_t>(items.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) throw EvalError("pop index out of range");
    Value v = items[static_cast<size_t>(i)];
    items.erase(items.begin() + i);
    return v;
  }
  if (name == "index") {
    const Value& x = required(a, 0, "index");
    for (size_t i = 0; i < items.size(); ++i) {
      if (values_equal(items[i], x)) return Value(i);
    }
    throw EvalError("value is not in the list");
  }
  if (name == "count") {
    const Value& x = required(a, 0, "count");
    return Value(static_cast<int64_t>(
        std::count_if(items.begin(), items.end(), [&](const Value& v) { return values_equal(v, x); })));
  }
  throw EvalError("lists have no method '" + name + "'");
}

constexpr std::string_view kListMethods[] = {"append", "extend", "insert", "pop", "index", "count"};
constexpr std::string_view kDictMethods[] = {"items",      "keys",   "values", "get",  "pop",
                                             "setdefault", "update", "copy",   "clear"};

Value call_dict_method(const std::string& name, const ObjectPtr& dict, CallArgs& a) {
  Object& obj = *dict;
  if (name == "items") {
    Array out;
    for (const auto& [key, value] : obj.entries()) out.push_back(Value::new_array({Value(key), value}));
    return Value::new_array(std::move(out));
  }
  if (name == "keys" || name == "values") {
    Array out;
    for (const auto& [key, value] : obj.entries()) out.push_back(name == "keys" ? Value(key) : value);
    return Value::new_array(std::move(out));
  }
  if (name == "get" || name == "pop" || name == "setdefault") {
    const Value& key = required(a, 0, name.c_str());
    const std::string k = text_of(key);
    const bool has_default = a.positional.size() > 1 || a.named_arg("default");
    const Value fallback = has_default ? a.get(1, "default") : Value::none();
    const Value* found = obj.find(k);
    if (name == "get") return found ? *found : fallback;
    if (name == "setdefault") {
      if (found) return *found;
      obj.set(k, fallback);
      return fallback;
    }
    if (!found) {
      if (!has_default) throw EvalError("key '" + k + "' not found");
      return fallback;
    }
    Value v = *found;
    obj.erase(k);
    return v;
  }
  if (name == "update") {
    if (!a.positional.empty()) {
      const Value& other = a.positional[0];
      if (!other.is_object()) throw EvalError(std::string("update needs a dict, not a ") + other.type_name());
      for (const auto& [key, value] : other.object().entries()) obj.set(key, value);
    }
    for (const auto& [key, value] : a.named) obj.set(key, value);
    return Value::none();
  }
  if (name == "copy") {
    Value copy = Value::new_object();
    for (const auto& [key, value] : obj.entries()) copy.object().set(key, value);
    return copy;
  }
  if (name == "clear") {
    obj.clear();
    return Value::none();
  }
  throw EvalError("dicts have no method '" + name + "'");
}

template <size_t N>
bool listed(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

}  // namespace

bool is_dict_method(std::string_view name) { return listed(kDictMethods, name); }

Value bound_method(const Value& receiver, std::string_view name) {
  const std::string n(name);
  if (receiver.is_string() && listed(kStringMethods, name)) {
    const std::string s = receiver.str();
    return make_function("str." + n, [n, s](CallArgs& a) { return call_string_method(n, s, a); });
  }
  if (receiver.is_array() && listed(kListMethods, name)) {
    const ArrayPtr list = receiver.array_ptr();
    return make_function("list." + n, [n, list](CallArgs& a) { return call_list_method(n, list, a); });
  }
  if (receiver.is_object() && listed(kDictMethods, name)) {
    const ObjectPtr dict = receiver.object_ptr();
    return make_function("dict." + n, [n, dict](CallArgs& a) { return call_dict_method(n, dict, a); });
  }
  return Value();
}

}  // namespace df::jinja

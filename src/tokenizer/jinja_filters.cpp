// The filters of the template language (value | name(args)), with Jinja2's semantics.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/jinja_builtin_args.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_renderer.h"
#include "tokenizer/jinja_strings.h"

namespace df::jinja {
namespace {

using FilterFn = Value (*)(Renderer&, const Value&, CallArgs&);

Value f_abs(Renderer&, const Value& in, CallArgs&) {
  if (is_integral(in)) {
    const int64_t v = integral(in);
    if (v == INT64_MIN) throw EvalError("integer overflow");
    return Value(v < 0 ? -v : v);
  }
  if (in.is_float()) return Value(std::fabs(in.float_value()));
  throw EvalError(std::string("abs needs a number, not a ") + in.type_name());
}

Value f_attr(Renderer&, const Value& in, CallArgs& a) {
  const std::string name = required_string(a, 0, "name");
  if (in.is_object()) {
    const Value* v = in.object().find(name);
    if (v) return *v;
  }
  return bound_method(in, name);
}

Value f_batch(Renderer& r, const Value& in, CallArgs& a) {
  const int64_t n = int_arg(a, 0, "linecount", 0);
  if (n <= 0) throw EvalError("batch size must be positive");
  const Value fill = a.get(1, "fill_with");
  Array out;
  Array current;
  for (const Value& item : items_of(in, "batch")) {
    current.push_back(item);
    if (static_cast<int64_t>(current.size()) == n) {
      out.push_back(Value::new_array(std::move(current)));
      current.clear();
    }
  }
  if (!current.empty()) {
    if (!fill.is_undefined() && !fill.is_none()) {
      while (static_cast<int64_t>(current.size()) < n) current.push_back(fill);
    }
    out.push_back(Value::new_array(std::move(current)));
  }
  r.check_list_size(out.size());
  return Value::new_array(std::move(out));
}

Value f_capitalize(Renderer&, const Value& in, CallArgs&) { return Value(python_capitalize(text_of(in))); }

Value f_length(Renderer&, const Value& in, CallArgs&) {
  switch (in.type()) {
    case Value::Type::kUndefined:
      return Value(int64_t{0});
    case Value::Type::kString:
      return Value(utf8_length(in.str()));
    case Value::Type::kArray:
      return Value(in.array().size());
    case Value::Type::kObject:
      return Value(in.object().size());
    default:
      throw EvalError(std::string("a ") + in.type_name() + " has no length");
  }
}

Value f_default(Renderer&, const Value& in, CallArgs& a) {
  const Value fallback =
      a.positional.empty() && !a.named_arg("default_value") ? Value("") : a.get(0, "default_value");
  const bool boolean = bool_arg(a, 1, "boolean", false);
  if (in.is_undefined() || (boolean && !in.truthy())) return fallback;
  return in;
}

Value f_dictsort(Renderer&, const Value& in, CallArgs& a) {
  if (in.is_undefined()) return Value::new_array();
  if (!in.is_object()) throw EvalError(std::string("dictsort needs a dict, not a ") + in.type_name());
  const bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
  const std::string by = string_arg(a, 1, "by").value_or("key");
  const bool reverse = bool_arg(a, 2, "reverse", false);
  if (by != "key" && by != "value") throw EvalError("dictsort's 'by' must be 'key' or 'value'");
  std::vector<std::pair<Value, Value>> rows;
  for (const auto& [key, value] : in.object().entries()) {
    const Value& k = by == "key" ? Value(key) : value;
    rows.emplace_back(sort_key(k, case_sensitive), Value::new_array({Value(key), value}));
  }
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& x, const auto& y) {
    return reverse ? value_less(y.first, x.first) : value_less(x.first, y.first);
  });
  Array out;
  for (auto& row : rows) out.push_back(std::move(row.second));
  return Value::new_array(std::move(out));
}

Value f_escape(Renderer&, const Value& in, CallArgs&) { return Value(html_escape(text_of(in))); }

Value f_first(Renderer&, const Value& in, CallArgs&) {
  std::vector<Value> items = items_of(in, "first");
  return items.empty() ? Value() : items.front();
}

Value f_last(Renderer&, const Value& in, CallArgs&) {
  std::vector<Value> items = items_of(in, "last");
  return items.empty() ? Value() : items.back();
}

std::optional<double> parse_float(std::string_view s) {
  std::string t = python_strip(s, std::nullopt, true, true);
  double d = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), d);
  if (ec != std::errc() || ptr != t.data() + t.size() || t.empty()) return std::nullopt;
  return d;
}

Value f_float(Renderer&, const Value& in, CallArgs& a) {
  if (in.is_number() || in.is_bool()) return Value(in.number());
  if (in.is_string()) {
    if (auto d = parse_float(in.str())) return Value(*d);
  }
  const Value fallback = a.get(0, "default");
  return fallback.is_undefined() ? Value(0.0) : fallback;
}

Value f_int(Renderer&, const Value& in, CallArgs& a) {
  if (is_integral(in)) return Value(integral(in));
  if (in.is_float() && std::isfinite(in.float_value())) return Value(static_cast<int64_t>(in.float_value()));
  if (in.is_string()) {
    const std::string t = python_strip(in.str(), std::nullopt, true, true);
    const int base = static_cast<int>(int_arg(a, 1, "base", 10));
    int64_t v = 0;
    const char* begin = t.data() + (t.size() > 1 && t[0] == '+' ? 1 : 0);
    auto [ptr, ec] = std::from_chars(begin, t.data() + t.size(), v, base);
    if (ec == std::errc() && ptr == t.data() + t.size() && !t.empty()) return Value(v);
    if (auto d = parse_float(t); d && std::isfinite(*d)) return Value(static_cast<int64_t>(*d));
  }
  const Value fallback = a.get(0, "default");
  return fallback.is_undefined() ? Value(int64_t{0}) : fallback;
}

Value f_indent(Renderer&, const Value& in, CallArgs& a) {
  const Value width = a.get(0, "width");
  const std::string pad =
      width.is_string()
          ? width.str()
          : std::string(static_cast<size_t>(std::max<int64_t>(0, int_arg(a, 0, "width", 4))), ' ');
  const bool first = bool_arg(a, 1, "first", false);
  const bool blank = bool_arg(a, 2, "blank", false);
  std::vector<std::string> lines = python_splitlines(text_of(in) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += pad;
    }
    out += lines[i];
  }
  if (first) out = pad + out;
  return Value(std::move(out));
}

Value f_items(Renderer&, const Value& in, CallArgs&) {
  if (in.is_undefined() || in.is_none()) return Value::new_array();
  if (!in.is_object()) throw EvalError(std::string("items needs a dict, not a ") + in.type_name());
  Array out;
  for (const auto& [key, value] : in.object().entries()) out.push_back(Value::new_array({Value(key), value}));
  return Value::new_array(std::move(out));
}

Value f_join(Renderer& r, const Value& in, CallArgs& a) {
  const std::string sep = string_arg(a, 0, "d").value_or("");
  const Value attribute = a.get(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : items_of(in, "join")) {
    if (!first) out += sep;
    first = false;
    out += text_of(attribute.is_undefined() ? item : attribute_path(item, attribute));
    r.check_string_size(out.size());
  }
  return Value(std::move(out));
}

Value f_list(Renderer&, const Value& in, CallArgs&) { return Value::new_array(items_of(in, "list")); }

Value f_lower(Renderer&, const Value& in, CallArgs&) { return Value(ascii_lower(text_of(in))); }
Value f_upper(Renderer&, const Value& in, CallArgs&) { return Value(ascii_upper(text_of(in))); }

Value f_map(Renderer& r, const Value& in, CallArgs& a) {
  const std::vector<Value> items = in.is_none() ? std::vector<Value>{} : items_of(in, "map");
  Array out;
  if (const Value* attribute = a.named_arg("attribute")) {
    const Value* fallback = a.named_arg("default");
    for (const Value& item : items) {
      Value v = attribute_path(item, *attribute);
      if (v.is_undefined() && fallback) v = *fallback;
      out.push_back(std::move(v));
    }
    return Value::new_array(std::move(out));
  }
  const Value& filter = required(a, 0, "map");
  if (!filter.is_string()) throw EvalError("map needs a filter name or attribute=");
  CallArgs rest;
  rest.renderer = a.renderer;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.named = a.named;
  for (const Value& item : items) {
    CallArgs args = rest;
    out.push_back(apply_filter(r, filter.str(), item, args));
  }
  return Value::new_array(std::move(out));
}

Value min_or_max(const Value& in, CallArgs& a, bool want_max) {
  const bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
  const Value attribute = a.get(1, "attribute");
  const std::vector<Value> items = items_of(in, want_max ? "max" : "min");
  if (items.empty()) return Value();
  size_t best = 0;
  auto key = [&](size_t i) {
    return sort_key(attribute.is_undefined() ? items[i] : attribute_path(items[i], attribute),
                    case_sensitive);
  };
  for (size_t i = 1; i < items.size(); ++i) {
    if (want_max ? value_less(key(best), key(i)) : value_less(key(i), key(best))) best = i;
  }
  return items[best];
}

Value f_max(Renderer&, const Value& in, CallArgs& a) { return min_or_max(in, a, true); }
Value f_min(Renderer&, const Value& in, CallArgs& a) { return min_or_max(in, a, false); }

// select / reject: select() keeps truthy items; select("test", args...) keeps those passing the test.
Value select_items(Renderer& r, const Value& in, CallArgs& a, bool keep_passing, bool by_attribute) {
  if (in.is_none()) return Value::new_array();
  const std::vector<Value> items = items_of(in, "select");
  size_t next = 0;
  Value attribute;
  if (by_attribute) attribute = required(a, next++, "selectattr");
  std::optional<std::string> test;
  if (next < a.positional.size()) {
    if (!a.positional[next].is_string()) throw EvalError("the test name must be a string");
    test = a.positional[next++].str();
  }
  CallArgs test_args;
  test_args.renderer = a.renderer;
  test_args.positional.assign(
      a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, a.positional.size())),
      a.positional.end());
  test_args.named = a.named;
  Array out;
  for (const Value& item : items) {
    const Value subject = by_attribute ? attribute_path(item, attribute) : item;
    CallArgs args = test_args;
    const bool passes = test ? apply_test(r, *test, subject, args) : subject.truthy();
    if (passes == keep_passing) out.push_back(item);
  }
  return Value::new_array(std::move(out));
}

Value f_select(Renderer& r, const Value& in, CallArgs& a) { return select_items(r, in, a, true, false); }
Value f_reject(Renderer& r, const Value& in, CallArgs& a) { return select_items(r, in, a, false, false); }
Value f_selectattr(Renderer& r, const Value& in, CallArgs& a) { return select_items(r, in, a, true, true); }
Value f_rejectattr(Renderer& r, const Value& in, CallArgs& a) { return select_items(r, in, a, false, true); }

Value f_replace(Renderer& r, const Value& in, CallArgs& a) {
  const std::string old_sub = text_of(required(a, 0, "replace"));
  const std::string new_sub = text_of(required(a, 1, "replace"));
  std::string out = python_replace(text_of(in), old_sub, new_sub, int_arg(a, 2, "count", -1));
  r.check_string_size(out.size());
  return Value(std::move(out));
}

Value f_reverse(Renderer&, const Value& in, CallArgs&) {
  if (in.is_string()) {
    auto chars = utf8_chars(in.str());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value(std::move(out));
  }
  std::vector<Value> items = items_of(in, "reverse");
  std::reverse(items.begin(), items.end());
  return Value::new_array(std::move(items));
}

Value f_round(Renderer&, const Value& in, CallArgs& a) {
  if (!in.is_number() && !in.is_bool())
    throw EvalError(std::string("round needs a number, not a ") + in.type_name());
  const int64_t precision = int_arg(a, 0, "precision", 0);
  const std::string method = string_arg(a, 1, "method").value_or("common");
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = in.number() * scale;
  double rounded;
  if (method == "common") {
    rounded = std::nearbyint(x);  // Python's round(): half to even
  } else if (method == "ceil") {
    rounded = std::ceil(x);
  } else if (method == "floor") {
    rounded = std::floor(x);
  } else {
    throw EvalError("round's method must be 'common', 'ceil' or 'floor'");
  }
  return Value(rounded / scale);
}

Value f_safe(Renderer&, const Value& in, CallArgs&) { return in.is_undefined() ? Value("") : in; }

Value f_sort(Renderer&, const Value& in, CallArgs& a) {
  const bool reverse = bool_arg(a, 0, "reverse", false);
  const bool case_sensitive = bool_arg(a, 1, "case_sensitive", false);
  const Value attribute = a.get(2, "attribute");
  std::vector<Value> items = items_of(in, "sort");
  auto key = [&](const Value& v) {
    return sort_key(attribute.is_undefined() ? v : attribute_path(v, attribute), case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? value_less(key(y), key(x)) : value_less(key(x), key(y));
  });
  return Value::new_array(std::move(items));
}

Value f_string(Renderer&, const Value& in, CallArgs&) { return Value(text_of(in)); }

Value f_sum(Renderer&, const Value& in, CallArgs& a) {
  const Value attribute = a.get(0, "attribute");
  Value total = a.get(1, "start");
  if (total.is_undefined()) total = Value(int64_t{0});
  for (const Value& item : items_of(in, "sum")) {
    const Value v = attribute.is_undefined() ? item : attribute_path(item, attribute);
    if (!(v.is_number() || v.is_bool()) || !(total.is_number() || total.is_bool())) {
      throw EvalError(std::string("sum needs numbers, not a ") + v.type_name());
    }
    if (is_integral(total) && is_integral(v)) {
      int64_t r;
      if (__builtin_add_overflow(integral(total), integral(v), &r)) throw EvalError("integer overflow");
      total = Value(r);
    } else {
      total = Value(total.number() + v.number());
    }
  }
  return total;
}

Value f_title(Renderer&, const Value& in, CallArgs&) { return Value(jinja_title(text_of(in))); }

Value f_tojson(Renderer& r, const Value& in, CallArgs& a) {
  JsonFormat format;
  format.indent = static_cast<int>(int_arg(a, 0, "indent", -1));
  if (format.indent >= 0) format.item_separator = ",";
  format.ensure_ascii = bool_arg(a, 1, "ensure_ascii", false);
  format.sort_keys = bool_arg(a, 3, "sort_keys", false);
  const Value separators = a.get(2, "separators");
  if (separators.is_array()) {
    const Array& seps = separators.array();
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
      throw EvalError("tojson's separators must be two strings");
    }
    format.item_separator = seps[0].str();
    format.key_separator = seps[1].str();
  }
  std::string out = to_json(in, format);
  r.check_string_size(out.size());
  return Value(std::move(out));
}

Value f_trim(Renderer&, const Value& in, CallArgs& a) {
  return Value(python_strip(text_of(in), string_arg(a, 0, "chars"), true, true));
}

Value f_unique(Renderer&, const Value& in, CallArgs& a) {
  const bool case_sensitive = bool_arg(a, 0, "case_sensitive", false);
  const Value attribute = a.get(1, "attribute");
  Array out;
  std::vector<Value> seen;
  for (const Value& item : in.is_none() ? std::vector<Value>{} : items_of(in, "unique")) {
    Value key = sort_key(attribute.is_undefined() ? item : attribute_path(item, attribute), case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::new_array(std::move(out));
}

Value f_wordcount(Renderer&, const Value& in, CallArgs&) {
  const std::string s = text_of(in);
  int64_t words = 0;
  bool in_word = false;
  for (unsigned char c : s) {
    const bool word_char = std::isalnum(c) || c == '_' || c >= 0x80;
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value(words);
}

const std::vector<std::pair<std::string_view, FilterFn>>& filter_table() {
  static const std::vector<std::pair<std::string_view, FilterFn>> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", f_capitalize},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

FilterFn find_filter(std::string_view name) {
  for (const auto& [n, fn] : filter_table()) {
    if (n == name) return fn;
  }
  return nullptr;
}

}  // namespace

Value apply_filter(Renderer& r, std::string_view name, const Value& input, CallArgs& args) {
  args.renderer = &r;
  if (FilterFn fn = find_filter(name)) return fn(r, input, args);
  // llama.cpp lets a method double as a filter ("x | strip", "x | split(',')").
  const Value method = bound_method(input, name);
  if (method.is_function()) return method.function().call(args);
  throw EvalError("unknown filter '" + std::string(name) + "' (for a " + input.type_name() + ")");
}

bool has_filter(std::string_view name) { return find_filter(name) != nullptr; }

}  // namespace df::jinja

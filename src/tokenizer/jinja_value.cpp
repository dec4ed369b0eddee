#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace df::jinja {
namespace {

// Printing, comparing and serializing walk nested values; a list that was made to contain itself must fail
// cleanly instead of recursing until the stack overflows.
constexpr int kMaxNesting = 512;

void check_nesting(int depth) {
  if (depth > kMaxNesting)
    throw EvalError("value is nested too deeply (a list or dict that contains itself?)");
}

constexpr size_t kIndexThreshold = 16;

void append_repr(std::string& out, const Value& v, int depth);

void append_string_repr(std::string& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out += quote;
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
}

void append_output(std::string& out, const Value& v, int depth) {
  check_nesting(depth);
  switch (v.type()) {
    case Value::Type::kUndefined:
      return;
    case Value::Type::kNone:
      out += "None";
      return;
    case Value::Type::kBool:
      out += v.bool_value() ? "True" : "False";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.int_value());
      return;
    case Value::Type::kFloat:
      out += float_repr(v.float_value());
      return;
    case Value::Type::kString:
      out += v.str();
      return;
    case Value::Type::kArray: {
      out += '[';
      bool first = true;
      for (const Value& item : v.array()) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, item, depth + 1);
      }
      out += ']';
      return;
    }
    case Value::Type::kObject: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.object().entries()) {
        if (!first) out += ", ";
        first = false;
        append_string_repr(out, key);
        out += ": ";
        append_repr(out, item, depth + 1);
      }
      out += '}';
      return;
    }
    case Value::Type::kFunction:
      out += "<function " + v.function().name + ">";
      return;
  }
}

void append_repr(std::string& out, const Value& v, int depth) {
  if (v.is_string()) {
    append_string_repr(out, v.str());
  } else if (v.is_undefined()) {
    out += "None";
  } else {
    append_output(out, v, depth);
  }
}

void append_u_escape(std::string& out, uint32_t unit) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", unit);
  out += buf;
}

// Decodes the UTF-8 sequence at s[i] for ensure_ascii; returns its length, or 0 when it is not valid UTF-8.
size_t decode_utf8(const std::string& s, size_t i, uint32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2;
    *cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3;
    *cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4;
    *cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (b & 0x3F);
  }
  return n;
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (ensure_ascii && c >= 0x80) {
      uint32_t cp = 0;
      const size_t n = decode_utf8(s, i, &cp);
      if (n == 0) {
        append_u_escape(out, 0xFFFD);
        continue;
      }
      if (cp >= 0x10000) {
        cp -= 0x10000;
        append_u_escape(out, 0xD800 + (cp >> 10));
        append_u_escape(out, 0xDC00 + (cp & 0x3FF));
      } else {
        append_u_escape(out, cp);
      }
      i += n - 1;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[16];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void append_json(std::string& out, const Value& v, const JsonFormat& f, int depth) {
  check_nesting(depth);
  const bool pretty = f.indent >= 0;
  auto newline = [&](int level) {
    if (!pretty) return;
    out += '\n';
    out.append(static_cast<size_t>(f.indent) * static_cast<size_t>(level), ' ');
  };
  switch (v.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      out += "null";
      return;
    case Value::Type::kBool:
      out += v.bool_value() ? "true" : "false";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.int_value());
      return;
    case Value::Type::kFloat: {
      const double d = v.float_value();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        out += float_repr(d);
      }
      return;
    }
    case Value::Type::kString:
      append_json_string(out, v.str(), f.ensure_ascii);
      return;
    case Value::Type::kArray: {
      const Array& items = v.array();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += f.item_separator;
        newline(depth + 1);
        append_json(out, items[i], f, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Type::kObject: {
      const Object& obj = v.object();
      if (obj.empty()) {
        out += "{}";
        return;
      }
      std::vector<const Object::Entry*> entries;
      for (const auto& e : obj.entries()) entries.push_back(&e);
      if (f.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += f.item_separator;
        newline(depth + 1);
        append_json_string(out, entries[i]->first, f.ensure_ascii);
        out += f.key_separator;
        append_json(out, entries[i]->second, f, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Value::Type::kFunction:
      throw EvalError("cannot serialize a function (" + v.function().name + ") to JSON");
  }
}

bool equal_at(const Value& a, const Value& b, int depth) {
  check_nesting(depth);
  const bool a_num = a.is_number() || a.is_bool();
  const bool b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    if (a.is_float() || b.is_float()) return a.number() == b.number();
    const int64_t ai = a.is_bool() ? int64_t{a.bool_value()} : a.int_value();
    const int64_t bi = b.is_bool() ? int64_t{b.bool_value()} : b.int_value();
    return ai == bi;
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return true;
    case Value::Type::kString:
      return a.str() == b.str();
    case Value::Type::kArray: {
      const Array& x = a.array();
      const Array& y = b.array();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equal_at(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Type::kObject: {
      const Object& x = a.object();
      const Object& y = b.object();
      if (x.size() != y.size()) return false;
      for (const auto& [key, item] : x.entries()) {
        const Value* other = y.find(key);
        if (!other || !equal_at(item, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Type::kFunction:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

bool less_at(const Value& a, const Value& b, int depth) {
  check_nesting(depth);
  const bool a_num = a.is_number() || a.is_bool();
  const bool b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    if (a.is_float() || b.is_float()) return a.number() < b.number();
    const int64_t ai = a.is_bool() ? int64_t{a.bool_value()} : a.int_value();
    const int64_t bi = b.is_bool() ? int64_t{b.bool_value()} : b.int_value();
    return ai < bi;
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_array() && b.is_array()) {
    const Array& x = a.array();
    const Array& y = b.array();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less_at(x[i], y[i], depth + 1)) return true;
      if (less_at(y[i], x[i], depth + 1)) return false;
    }
    return x.size() < y.size();
  }
  throw EvalError(std::string("cannot compare ") + a.type_name() + " with " + b.type_name());
}

}  // namespace

namespace {
thread_local ContainerArena* current_arena = nullptr;
}  // namespace

ContainerArena::ContainerArena() : previous_(current_arena) { current_arena = this; }

ContainerArena::~ContainerArena() {
  current_arena = previous_;
  // Every container is still held here, so emptying one never cascades into destroying a deep chain of
  // others.
  for (auto& a : arrays_) a->clear();
  for (auto& o : objects_) o->clear();
}

ContainerArena* ContainerArena::current() { return current_arena; }

void ContainerArena::count_one() {
  if (arrays_.size() + objects_.size() >= limit_) {
    throw EvalError("the template made more than " + std::to_string(limit_) + " lists and dicts");
  }
}

void ContainerArena::adopt(ArrayPtr a) {
  count_one();
  arrays_.push_back(std::move(a));
}

void ContainerArena::adopt(ObjectPtr o) {
  count_one();
  objects_.push_back(std::move(o));
}

Value Value::new_array(Array items) {
  auto a = std::make_shared<Array>(std::move(items));
  if (current_arena) current_arena->adopt(a);
  return Value(std::move(a));
}

Value Value::new_object() {
  auto o = std::make_shared<Object>();
  if (current_arena) current_arena->adopt(o);
  return Value(std::move(o));
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json(item));
      return new_array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value obj = new_object();
      for (auto it = j.begin(); it != j.end(); ++it) obj.object().set(it.key(), from_json(it.value()));
      return obj;
    }
    default:
      return Value();  // binary and discarded values have no template meaning
  }
}

double Value::number() const {
  if (is_bool()) return bool_value() ? 1.0 : 0.0;
  if (is_int()) return static_cast<double>(int_value());
  return float_value();
}

bool Value::truthy() const {
  switch (type()) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
      return bool_value();
    case Type::kInt:
      return int_value() != 0;
    case Type::kFloat:
      return float_value() != 0.0;
    case Type::kString:
      return !str().empty();
    case Type::kArray:
      return !array().empty();
    case Type::kObject:
      return !object().empty();
    case Type::kFunction:
      return true;
  }
  return false;
}

std::string Value::to_output() const {
  if (is_string()) return str();
  std::string out;
  append_output(out, *this, 0);
  return out;
}

std::string Value::repr() const {
  std::string out;
  append_repr(out, *this, 0);
  return out;
}

const char* Value::type_name() const {
  switch (type()) {
    case Type::kUndefined:
      return "undefined";
    case Type::kNone:
      return "none";
    case Type::kBool:
      return "boolean";
    case Type::kInt:
      return "integer";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "string";
    case Type::kArray:
      return "list";
    case Type::kObject:
      return "dict";
    case Type::kFunction:
      return "function";
  }
  return "?";
}

const Value* Object::find(std::string_view key) const {
  if (!index_.empty()) {
    auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& e : entries_) {
    if (e.first == key) return &e.second;
  }
  return nullptr;
}

Value* Object::find(std::string_view key) {
  return const_cast<Value*>(static_cast<const Object*>(this)->find(key));
}

void Object::set(const std::string& key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
    return;
  }
  entries_.emplace_back(key, std::move(value));
  if (!index_.empty()) {
    index_.emplace(key, entries_.size() - 1);
  } else if (entries_.size() > kIndexThreshold) {
    reindex();
  }
}

bool Object::erase(std::string_view key) {
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.first == key; });
  if (it == entries_.end()) return false;
  entries_.erase(it);
  reindex();
  return true;
}

void Object::clear() {
  entries_.clear();
  index_.clear();
}

void Object::reindex() {
  index_.clear();
  if (entries_.size() <= kIndexThreshold) return;
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
}

Value CallArgs::get(size_t pos, std::string_view name) const {
  if (const Value* v = named_arg(name)) return *v;
  if (pos < positional.size()) return positional[pos];
  return Value();
}

const Value* CallArgs::named_arg(std::string_view name) const {
  for (const auto& [key, value] : named) {
    if (key == name) return &value;
  }
  return nullptr;
}

Value make_function(std::string name, std::function<Value(CallArgs&)> call) {
  return Value(FunctionPtr(std::make_shared<const Function>(Function{std::move(name), std::move(call)})));
}

bool values_equal(const Value& a, const Value& b) { return equal_at(a, b, 0); }

bool value_less(const Value& a, const Value& b) { return less_at(a, b, 0); }

std::string to_json(const Value& v, const JsonFormat& format) {
  std::string out;
  append_json(out, v, format, 0);
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest digits that round-trip, as Python's repr uses; only the layout differs from to_chars.
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (!sci.empty() && sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string out = sign;
  if (exponent >= -4 && exponent < 16) {
    if (exponent >= 0) {
      const size_t int_len = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    } else {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_buf;
  }
  return out;
}

}  // namespace df::jinja

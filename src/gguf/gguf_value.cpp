#include <cmath>
#include <limits>

#include "gguf/gguf.h"
#include "util/error.h"

namespace df::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "UINT8";
    case ValueType::INT8: return "INT8";
    case ValueType::UINT16: return "UINT16";
    case ValueType::INT16: return "INT16";
    case ValueType::UINT32: return "UINT32";
    case ValueType::INT32: return "INT32";
    case ValueType::FLOAT32: return "FLOAT32";
    case ValueType::BOOL: return "BOOL";
    case ValueType::STRING: return "STRING";
    case ValueType::ARRAY: return "ARRAY";
    case ValueType::UINT64: return "UINT64";
    case ValueType::INT64: return "INT64";
    case ValueType::FLOAT64: return "FLOAT64";
  }
  return "?";
}

bool Value::is_int() const {
  switch (type) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64: return true;
    default: return false;
  }
}

bool Value::is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }

static bool is_unsigned(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 || t == ValueType::UINT64;
}

int64_t Value::as_int(std::string_view what) const {
  if (!is_int()) fail("{}: expected an integer, found {}", what, value_type_name(type));
  if (is_unsigned(type)) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) fail("{}: value {} is out of range", what, u);
    return static_cast<int64_t>(u);
  }
  return i;
}

double Value::as_float(std::string_view what) const {
  if (is_float()) return f;
  if (is_int()) return static_cast<double>(as_int(what));
  fail("{}: expected a number, found {}", what, value_type_name(type));
}

bool Value::as_bool(std::string_view what) const {
  if (type == ValueType::BOOL) return u != 0;
  fail("{}: expected BOOL, found {}", what, value_type_name(type));
}

const std::string& Value::as_string(std::string_view what) const {
  if (type != ValueType::STRING) fail("{}: expected STRING, found {}", what, value_type_name(type));
  return s;
}

Value Value::of_u32(uint32_t v) {
  Value x;
  x.type = ValueType::UINT32;
  x.u = v;
  return x;
}
Value Value::of_i32(int32_t v) {
  Value x;
  x.type = ValueType::INT32;
  x.i = v;
  return x;
}
Value Value::of_u64(uint64_t v) {
  Value x;
  x.type = ValueType::UINT64;
  x.u = v;
  return x;
}
Value Value::of_f32(float v) {
  Value x;
  x.type = ValueType::FLOAT32;
  x.f = v;
  return x;
}
Value Value::of_bool(bool v) {
  Value x;
  x.type = ValueType::BOOL;
  x.u = v ? 1 : 0;
  return x;
}
Value Value::of_string(std::string v) {
  Value x;
  x.type = ValueType::STRING;
  x.s = std::move(v);
  return x;
}
Value Value::of_array(ValueType elem, std::vector<Value> items) {
  Value x;
  x.type = ValueType::ARRAY;
  x.elem = elem;
  for (const auto& it : items)
    if (it.type != elem) fail("array of {} holds a {}", value_type_name(elem), value_type_name(it.type));
  x.arr = std::move(items);
  return x;
}
Value Value::of_strings(const std::vector<std::string>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (const auto& s : items) v.push_back(of_string(s));
  return of_array(ValueType::STRING, std::move(v));
}
Value Value::of_i32s(const std::vector<int32_t>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (auto i : items) v.push_back(of_i32(i));
  return of_array(ValueType::INT32, std::move(v));
}
Value Value::of_f32s(const std::vector<float>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (auto f : items) v.push_back(of_f32(f));
  return of_array(ValueType::FLOAT32, std::move(v));
}

}  // namespace df::gguf

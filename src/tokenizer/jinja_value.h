#pragma once
// The values a chat template computes with. Lists and dicts have reference semantics (a namespace attribute
// set or list.append is seen through every name bound to the object), as in Python; everything else is a
// plain value.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace df::jinja {

// An evaluation failure without a position; the renderer adds the template position of the node that failed.
class EvalError : public std::runtime_error {
 public:
  explicit EvalError(const std::string& what) : std::runtime_error(what) {}
};

class Value;
class Object;
struct Function;
class Renderer;

using Array = std::vector<Value>;
using ArrayPtr = std::shared_ptr<Array>;
using ObjectPtr = std::shared_ptr<Object>;
using FunctionPtr = std::shared_ptr<const Function>;

class Value {
 public:
  enum class Type : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };

  Value() = default;  // undefined
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(b) {}
  Value(int v) : v_(int64_t{v}) {}
  Value(int64_t v) : v_(v) {}
  Value(size_t v) : v_(static_cast<int64_t>(v)) {}
  Value(double v) : v_(v) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(ArrayPtr a) : v_(std::move(a)) {}
  Value(ObjectPtr o) : v_(std::move(o)) {}
  Value(FunctionPtr f) : v_(std::move(f)) {}

  static Value none() { return Value(nullptr); }
  // Lists and dicts are made only through these, so that the render's ContainerArena owns them.
  static Value new_array(Array items = {});
  static Value new_object();
  static Value from_json(const nlohmann::ordered_json& j);

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_undefined() const { return type() == Type::kUndefined; }
  bool is_none() const { return type() == Type::kNone; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_float() const { return type() == Type::kFloat; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return type() == Type::kString; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_object() const { return type() == Type::kObject; }
  bool is_function() const { return type() == Type::kFunction; }

  bool bool_value() const { return std::get<bool>(v_); }
  int64_t int_value() const { return std::get<int64_t>(v_); }
  double float_value() const { return std::get<double>(v_); }
  // A number (bool counts as 0/1, as in Python) as a double.
  double number() const;
  const std::string& str() const { return std::get<std::string>(v_); }
  Array& array() const { return *std::get<ArrayPtr>(v_); }
  const ArrayPtr& array_ptr() const { return std::get<ArrayPtr>(v_); }
  Object& object() const { return *std::get<ObjectPtr>(v_); }
  const ObjectPtr& object_ptr() const { return std::get<ObjectPtr>(v_); }
  const Function& function() const { return *std::get<FunctionPtr>(v_); }

  // Python truthiness; undefined is false.
  bool truthy() const;
  // What {{ value }} prints: strings raw, None as "None", booleans as True/False, lists and dicts as Python
  // reprs, undefined as nothing.
  std::string to_output() const;
  // Python repr(): strings quoted.
  std::string repr() const;
  // Name of the type for error messages ("string", "list", ...).
  const char* type_name() const;

 private:
  std::variant<std::monostate, std::nullptr_t, bool, int64_t, double, std::string, ArrayPtr, ObjectPtr,
               FunctionPtr>
      v_;
};

// A dict that keeps insertion order (as Python dicts and llama.cpp's ordered_json do). Keys are strings.
class Object {
 public:
  using Entry = std::pair<std::string, Value>;

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  // Inserts at the end, or replaces the value in place when the key exists.
  void set(const std::string& key, Value value);
  bool erase(std::string_view key);
  void clear();
  size_t size() const { return entries_.size(); }
  // namespace() objects and the loop object: obj.name always means the entry, never a dict method.
  bool attributes_only() const { return attributes_only_; }
  void set_attributes_only(bool v) { attributes_only_ = v; }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  void reindex();
  std::vector<Entry> entries_;
  // Only built for larger dicts; small ones are searched linearly.
  std::unordered_map<std::string, size_t> index_;
  bool attributes_only_ = false;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  Renderer* renderer = nullptr;

  // The argument given by keyword `name` or else at position `pos` (undefined when neither is present).
  Value get(size_t pos, std::string_view name) const;
  const Value* named_arg(std::string_view name) const;
};

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

Value make_function(std::string name, std::function<Value(CallArgs&)> call);

// Every list and dict made during a render is held here until the render ends, then emptied one by one: a
// value nested a million levels deep, or one that contains itself, is released without recursion and without
// a leak.
class ContainerArena {
 public:
  ContainerArena();
  ~ContainerArena();
  ContainerArena(const ContainerArena&) = delete;
  ContainerArena& operator=(const ContainerArena&) = delete;

  // The arena of the render running on this thread, if any.
  static ContainerArena* current();
  // Beyond `limit` containers, making another throws EvalError (memory bound of a hostile template).
  void set_limit(size_t limit) { limit_ = limit; }
  void adopt(ArrayPtr a);
  void adopt(ObjectPtr o);

 private:
  void count_one();
  ContainerArena* previous_;
  size_t limit_ = SIZE_MAX;
  std::vector<ArrayPtr> arrays_;
  std::vector<ObjectPtr> objects_;
};

// Python ==: numbers (and booleans) compare by value, lists and dicts deeply, other types by identity of
// type.
bool values_equal(const Value& a, const Value& b);
// Python <: numbers with numbers, strings with strings (bytewise), lists lexicographically; else EvalError.
bool value_less(const Value& a, const Value& b);

struct JsonFormat {
  int indent = -1;  // < 0: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // \uXXXX for non-ASCII, as Python's default json.dumps
};
// llama.cpp's tojson: Python json.dumps separators (", " and ": ", or "," and ": " with an indent), keys in
// insertion order, non-ASCII bytes left as they are (ensure_ascii=False); undefined becomes null.
std::string to_json(const Value& v, const JsonFormat& format = {});

// Python repr of a float ("1.0", "0.1", "1e-05", "inf").
std::string float_repr(double d);

}  // namespace df::jinja

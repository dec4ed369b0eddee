// The tests of the template language (value is name(args)), with Jinja2's semantics.
#include <algorithm>
#include <string>

#include "tokenizer/jinja_builtin_args.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_renderer.h"
#include "tokenizer/jinja_strings.h"

namespace df::jinja {
namespace {

using TestFn = bool (*)(Renderer&, const Value&, CallArgs&);

int64_t integral_operand(const Value& in, const char* test) {
  if (!is_integral(in))
    throw EvalError(std::string("the '") + test + "' test needs an integer, not a " + in.type_name());
  return integral(in);
}

bool t_defined(Renderer&, const Value& in, CallArgs&) { return !in.is_undefined(); }
bool t_undefined(Renderer&, const Value& in, CallArgs&) { return in.is_undefined(); }
bool t_none(Renderer&, const Value& in, CallArgs&) { return in.is_none(); }
bool t_boolean(Renderer&, const Value& in, CallArgs&) { return in.is_bool(); }
bool t_false(Renderer&, const Value& in, CallArgs&) { return in.is_bool() && !in.bool_value(); }
bool t_true(Renderer&, const Value& in, CallArgs&) { return in.is_bool() && in.bool_value(); }
bool t_integer(Renderer&, const Value& in, CallArgs&) { return in.is_int(); }
bool t_float(Renderer&, const Value& in, CallArgs&) { return in.is_float(); }
bool t_number(Renderer&, const Value& in, CallArgs&) { return in.is_number() || in.is_bool(); }
bool t_string(Renderer&, const Value& in, CallArgs&) { return in.is_string(); }
bool t_mapping(Renderer&, const Value& in, CallArgs&) { return in.is_object(); }
bool t_iterable(Renderer&, const Value& in, CallArgs&) {
  return in.is_array() || in.is_string() || in.is_object() || in.is_undefined();
}
bool t_callable(Renderer&, const Value& in, CallArgs&) { return in.is_function(); }
bool t_even(Renderer&, const Value& in, CallArgs&) { return integral_operand(in, "even") % 2 == 0; }
bool t_odd(Renderer&, const Value& in, CallArgs&) { return integral_operand(in, "odd") % 2 != 0; }
bool t_divisibleby(Renderer&, const Value& in, CallArgs& a) {
  const int64_t d = int_arg(a, 0, "num", 0);
  if (d == 0) throw EvalError("divisibleby 0");
  return integral_operand(in, "divisibleby") % d == 0;
}
bool t_eq(Renderer&, const Value& in, CallArgs& a) {
  return values_equal(in, required(a, 0, "the 'eq' test"));
}
bool t_ne(Renderer&, const Value& in, CallArgs& a) {
  return !values_equal(in, required(a, 0, "the 'ne' test"));
}
bool t_lt(Renderer&, const Value& in, CallArgs& a) { return value_less(in, required(a, 0, "the 'lt' test")); }
bool t_le(Renderer&, const Value& in, CallArgs& a) {
  return !value_less(required(a, 0, "the 'le' test"), in);
}
bool t_gt(Renderer&, const Value& in, CallArgs& a) { return value_less(required(a, 0, "the 'gt' test"), in); }
bool t_ge(Renderer&, const Value& in, CallArgs& a) {
  return !value_less(in, required(a, 0, "the 'ge' test"));
}
bool t_in(Renderer&, const Value& in, CallArgs& a) {
  const Value& seq = required(a, 0, "the 'in' test");
  if (seq.is_string()) return in.is_string() && seq.str().find(in.str()) != std::string::npos;
  if (seq.is_object()) return in.is_string() && seq.object().contains(in.str());
  if (seq.is_array()) {
    return std::any_of(seq.array().begin(), seq.array().end(),
                       [&](const Value& v) { return values_equal(v, in); });
  }
  return false;
}
bool t_lower(Renderer&, const Value& in, CallArgs&) {
  return in.is_string() && ascii_lower(in.str()) == in.str();
}
bool t_upper(Renderer&, const Value& in, CallArgs&) {
  return in.is_string() && ascii_upper(in.str()) == in.str();
}
bool t_sameas(Renderer&, const Value& in, CallArgs& a) {
  const Value& other = required(a, 0, "the 'sameas' test");
  if (in.type() != other.type()) return false;
  if (in.is_array()) return in.array_ptr() == other.array_ptr();
  if (in.is_object()) return in.object_ptr() == other.object_ptr();
  if (in.is_function()) return &in.function() == &other.function();
  return values_equal(in, other);
}
bool t_escaped(Renderer&, const Value&, CallArgs&) { return false; }
bool t_filter(Renderer&, const Value& in, CallArgs&) { return in.is_string() && has_filter(in.str()); }
bool t_test(Renderer&, const Value& in, CallArgs&);

const std::vector<std::pair<std::string_view, TestFn>>& test_table() {
  static const std::vector<std::pair<std::string_view, TestFn>> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"false", t_false},
      {"true", t_true},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_iterable},
      {"callable", t_callable},
      {"even", t_even},
      {"odd", t_odd},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"lower", t_lower},
      {"upper", t_upper},
      {"sameas", t_sameas},
      {"escaped", t_escaped},
      {"filter", t_filter},
      {"test", t_test},
  };
  return table;
}

TestFn find_test(std::string_view name) {
  for (const auto& [n, fn] : test_table()) {
    if (n == name) return fn;
  }
  return nullptr;
}

bool t_test(Renderer&, const Value& in, CallArgs&) {
  return in.is_string() && find_test(in.str()) != nullptr;
}

}  // namespace

bool apply_test(Renderer& r, std::string_view name, const Value& input, CallArgs& args) {
  args.renderer = &r;
  TestFn fn = find_test(name);
  if (!fn) throw EvalError("unknown test '" + std::string(name) + "'");
  return fn(r, input, args);
}

}  // namespace df::jinja

// The global functions of the template language: range, namespace, dict, raise_exception, strftime_now.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <string>
#include <vector>

#include "tokenizer/jinja_builtin_args.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_renderer.h"
#include "tokenizer/jinja_strings.h"

namespace df::jinja {
namespace {

Value g_range(CallArgs& a) {
  for (const Value& v : a.positional) {
    if (!is_integral(v)) throw EvalError(std::string("range() needs integers, not a ") + v.type_name());
  }
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  if (a.positional.size() == 1) {
    stop = integral(a.positional[0]);
  } else if (a.positional.size() == 2 || a.positional.size() == 3) {
    start = integral(a.positional[0]);
    stop = integral(a.positional[1]);
    if (a.positional.size() == 3) step = integral(a.positional[2]);
  } else {
    throw EvalError("range() takes 1 to 3 arguments");
  }
  if (step == 0) throw EvalError("range() step must not be zero");
  const double count = std::max(
      0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
  if (a.renderer) a.renderer->check_list_size(static_cast<size_t>(std::min(count, 1e18)));
  Array out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
  return Value::new_array(std::move(out));
}

Value make_attribute_object(CallArgs& a, bool is_namespace) {
  Value obj = Value::new_object();
  obj.object().set_attributes_only(is_namespace);
  for (const Value& v : a.positional) {
    if (!v.is_object())
      throw EvalError(std::string("expected keyword arguments or a dict, not a ") + v.type_name());
    for (const auto& [key, value] : v.object().entries()) obj.object().set(key, value);
  }
  for (const auto& [key, value] : a.named) obj.object().set(key, value);
  return obj;
}

Value g_raise_exception(CallArgs& a) {
  throw RaisedError(a.positional.empty() ? std::string("raise_exception() called")
                                         : text_of(a.positional[0]));
}

Value g_strftime_now(CallArgs& a) {
  const std::string format = text_of(required(a, 0, "strftime_now"));
  const std::time_t now = a.renderer ? a.renderer->now() : std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  if (format.empty()) return Value("");
  std::vector<char> buf(256);
  while (buf.size() <= 65536) {
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
    if (n > 0) return Value(std::string(buf.data(), n));
    buf.resize(buf.size() * 4);
  }
  throw EvalError("strftime_now: the formatted date is too long or empty");
}

}  // namespace

void add_global_functions(std::unordered_map<std::string, Value>& vars) {
  vars["range"] = make_function("range", g_range);
  vars["namespace"] = make_function("namespace", [](CallArgs& a) { return make_attribute_object(a, true); });
  vars["dict"] = make_function("dict", [](CallArgs& a) { return make_attribute_object(a, false); });
  vars["raise_exception"] = make_function("raise_exception", g_raise_exception);
  vars["strftime_now"] = make_function("strftime_now", g_strftime_now);
}

}  // namespace df::jinja

#include "tokenizer/jinja_renderer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "tokenizer/jinja_builtin_args.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_strings.h"

namespace df::jinja {
namespace {

[[noreturn]] void bad_operands(const char* op, const Value& a, const Value& b) {
  throw EvalError(std::string("unsupported operand types for ") + op + ": " + a.type_name() + " and " +
                  b.type_name());
}

int64_t add_checked(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw EvalError("integer overflow");
  return r;
}

int64_t sub_checked(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) throw EvalError("integer overflow");
  return r;
}

int64_t mul_checked(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw EvalError("integer overflow");
  return r;
}

Value int_power(int64_t base, int64_t exponent) {
  int64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = mul_checked(result, base);
    exponent >>= 1;
    if (exponent > 0) base = mul_checked(base, base);
  }
  return Value(result);
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool a_num = a.is_number() || a.is_bool();
  const bool b_num = b.is_number() || b.is_bool();
  if (!a_num || !b_num) bad_operands(op.c_str(), a, b);
  const bool ints = is_integral(a) && is_integral(b);
  if (op == "-") {
    if (ints) return Value(sub_checked(integral(a), integral(b)));
    return Value(a.number() - b.number());
  }
  if (op == "*") {
    if (ints) return Value(mul_checked(integral(a), integral(b)));
    return Value(a.number() * b.number());
  }
  if (op == "**") {
    if (ints && integral(b) >= 0) return int_power(integral(a), integral(b));
    return Value(std::pow(a.number(), b.number()));
  }
  if (b.number() == 0) throw EvalError("division by zero");
  if (op == "/") return Value(a.number() / b.number());
  if (op == "//") {
    if (ints) {
      const int64_t x = integral(a);
      const int64_t y = integral(b);
      if (x == std::numeric_limits<int64_t>::min() && y == -1) throw EvalError("integer overflow");
      int64_t q = x / y;
      if (x % y != 0 && ((x < 0) != (y < 0))) --q;
      return Value(q);
    }
    return Value(std::floor(a.number() / b.number()));
  }
  if (op == "%") {
    if (ints) {
      const int64_t x = integral(a);
      const int64_t y = integral(b);
      if (y == -1) return Value(int64_t{0});
      int64_t r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value(r);
    }
    double r = std::fmod(a.number(), b.number());
    if (r != 0 && ((r < 0) != (b.number() < 0))) r += b.number();
    return Value(r);
  }
  throw EvalError("unknown operator '" + op + "'");
}

// "in" with Python's meaning; undefined contains nothing.
bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::kUndefined:
      return false;
    case Value::Type::kString:
      if (!item.is_string()) {
        throw EvalError(std::string("'in <string>' needs a string on the left, not a ") + item.type_name());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::kArray:
      for (const Value& v : container.array()) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case Value::Type::kObject:
      return item.is_string() && container.object().contains(item.str());
    default:
      throw EvalError(std::string("argument of type ") + container.type_name() + " is not iterable");
  }
}

std::string describe_callee(const Expr& e) {
  if (e.kind == ExprKind::kName) return static_cast<const NameExpr&>(e).name;
  if (e.kind == ExprKind::kAttribute) return static_cast<const AttributeExpr&>(e).name;
  return "expression";
}

// Python slice bounds for a sequence of length n.
std::vector<size_t> slice_indices(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto as_int = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!is_integral(v))
      throw EvalError(std::string("slice ") + what + " must be an integer, not " + v.type_name());
    return integral(v);
  };
  const int64_t step = as_int(step_v, "step").value_or(1);
  if (step == 0) throw EvalError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(as_int(start_v, "start"), step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(as_int(stop_v, "stop"), step > 0 ? n : -1);
  std::vector<size_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(static_cast<size_t>(i));
  return out;
}

}  // namespace

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Renderer::DepthGuard::DepthGuard(Renderer* r) : renderer(r) {
  if (++r->depth_ > r->options_.limits.max_depth) {
    --r->depth_;
    throw EvalError("the template nests or recurses more than " +
                    std::to_string(r->options_.limits.max_depth) + " levels deep");
  }
}

Renderer::Renderer(const Body& program, const RenderOptions& options)
    : program_(program), options_(options) {}

std::time_t Renderer::now() const { return options_.now ? *options_.now : std::time(nullptr); }

void Renderer::check_list_size(size_t n) const {
  if (n > options_.limits.max_list_items) {
    throw EvalError("a list of " + std::to_string(n) + " items is over the limit of " +
                    std::to_string(options_.limits.max_list_items));
  }
}

void Renderer::check_string_size(size_t n) const {
  if (n > options_.limits.max_string_bytes) {
    throw EvalError("a string of " + std::to_string(n) + " bytes is over the limit of " +
                    std::to_string(options_.limits.max_string_bytes));
  }
}

std::string Renderer::render(const nlohmann::ordered_json& context) {
  ContainerArena arena;
  arena.set_limit(options_.limits.max_containers);
  // Macros hold the scope they were defined in, and scopes hold the macros: both are cut when the render
  // ends.
  struct ScopeCutter {
    std::vector<std::shared_ptr<Scope>> scopes;
    ~ScopeCutter() {
      for (auto& s : scopes) s->vars.clear();
    }
  } cutter;
  auto globals = std::make_shared<Scope>();
  add_global_functions(globals->vars);
  auto top = std::make_shared<Scope>();
  top->parent = globals;
  cutter.scopes = {globals, top};
  captured_ = &cutter.scopes;
  if (!context.is_null()) {
    if (!context.is_object()) throw EvalError("the template context must be a JSON object");
    for (auto it = context.begin(); it != context.end(); ++it)
      top->vars[it.key()] = Value::from_json(it.value());
  }
  std::string out;
  out_ = &out;
  exec_body(program_, top);
  out_ = nullptr;
  return out;
}

Value Renderer::call(const Value& callee, CallArgs& args, const std::string& what) {
  if (!callee.is_function()) {
    if (callee.is_undefined()) throw EvalError("'" + what + "' is undefined and cannot be called");
    throw EvalError("'" + what + "' is a " + callee.type_name() + ", not a function");
  }
  args.renderer = this;
  return callee.function().call(args);
}

void Renderer::emit(std::string_view text) {
  out_->append(text);
  check_string_size(out_->size());
}

std::string Renderer::capture(const Body& body, const std::shared_ptr<Scope>& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec_body(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Renderer::Flow Renderer::exec_body(const Body& body, const std::shared_ptr<Scope>& scope) {
  for (const StmtPtr& s : body) {
    const Flow f = exec(*s, scope);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  try {
    DepthGuard guard(this);
    switch (s.kind) {
      case StmtKind::kText:
        emit(static_cast<const TextStmt&>(s).text);
        return Flow::kNormal;
      case StmtKind::kOutput: {
        const Value v = eval(*static_cast<const OutputStmt&>(s).expr, scope);
        if (v.is_string()) {
          emit(v.str());
        } else {
          emit(v.to_output());
        }
        return Flow::kNormal;
      }
      case StmtKind::kIf: {
        const auto& st = static_cast<const IfStmt&>(s);
        for (const auto& [cond, body] : st.branches) {
          if (eval(*cond, scope).truthy()) return exec_body(body, scope);
        }
        return exec_body(st.else_body, scope);
      }
      case StmtKind::kFor:
        return exec_for(static_cast<const ForStmt&>(s), scope);
      case StmtKind::kSet:
        exec_set(static_cast<const SetStmt&>(s), scope);
        return Flow::kNormal;
      case StmtKind::kSetBlock:
        exec_set_block(static_cast<const SetBlockStmt&>(s), scope);
        return Flow::kNormal;
      case StmtKind::kMacro: {
        const auto& m = static_cast<const MacroStmt&>(s);
        scope->vars[m.name] = make_macro(m.params, m.body, m.name, scope);
        return Flow::kNormal;
      }
      case StmtKind::kCallBlock:
        exec_call_block(static_cast<const CallBlockStmt&>(s), scope);
        return Flow::kNormal;
      case StmtKind::kFilterBlock: {
        const auto& st = static_cast<const FilterBlockStmt&>(s);
        Value v(capture(st.body, scope));
        for (const ExprPtr& f : st.filters)
          v = apply_filter_expr(static_cast<const FilterExpr&>(*f), v, scope);
        emit(v.to_output());
        return Flow::kNormal;
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kDo:
        eval(*static_cast<const DoStmt&>(s).expr, scope);
        return Flow::kNormal;
    }
    return Flow::kNormal;
  } catch (const RaisedError& e) {
    throw LocatedError(s.pos, e.what(), true);
  } catch (const EvalError& e) {
    throw LocatedError(s.pos, e.what(), false);
  }
}

void Renderer::bind_targets(const std::vector<std::string>& targets, const Value& item, Scope& scope) {
  if (targets.size() == 1) {
    scope.vars[targets[0]] = item;
    return;
  }
  if (!item.is_array()) {
    throw EvalError("cannot unpack a " + std::string(item.type_name()) + " into " +
                    std::to_string(targets.size()) + " names");
  }
  const Array& values = item.array();
  if (values.size() != targets.size()) {
    throw EvalError("cannot unpack " + std::to_string(values.size()) + " values into " +
                    std::to_string(targets.size()) + " names");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = values[i];
}

Renderer::Flow Renderer::exec_for(const ForStmt& s, const std::shared_ptr<Scope>& scope) {
  const Value iterable = eval(*s.iterable, scope);
  std::vector<Value> items;
  switch (iterable.type()) {
    case Value::Type::kUndefined:
      break;
    case Value::Type::kArray:
      items = iterable.array();
      break;
    case Value::Type::kObject:
      // One name walks the keys (as Jinja2 does); two walk (key, value) pairs, as llama.cpp allows.
      for (const auto& [key, value] : iterable.object().entries()) {
        items.push_back(s.targets.size() == 1 ? Value(key) : Value::new_array({Value(key), value}));
      }
      break;
    case Value::Type::kString:
      for (std::string_view c : utf8_chars(iterable.str())) items.emplace_back(c);
      break;
    default:
      throw EvalError(std::string("cannot iterate over a ") + iterable.type_name());
  }
  auto loop_scope = std::make_shared<Scope>();
  loop_scope->parent = scope;
  auto count_iteration = [&] {
    if (++iterations_ > options_.limits.max_loop_iterations) {
      throw EvalError("the template ran more than " + std::to_string(options_.limits.max_loop_iterations) +
                      " loop iterations");
    }
  };
  if (s.filter) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      count_iteration();
      bind_targets(s.targets, item, *loop_scope);
      if (eval(*s.filter, loop_scope).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_body(s.else_body, scope);

  const size_t n = items.size();
  Value loop = Value::new_object();
  Object& fields = loop.object();
  fields.set_attributes_only(true);
  auto position = std::make_shared<size_t>(0);
  fields.set("cycle", make_function("loop.cycle", [position](CallArgs& args) -> Value {
               if (args.positional.empty()) throw EvalError("loop.cycle() needs at least one value");
               return args.positional[*position % args.positional.size()];
             }));
  fields.set("depth", Value(int64_t{1}));
  fields.set("depth0", Value(int64_t{0}));
  fields.set("length", Value(n));
  loop_scope->vars["loop"] = loop;
  for (size_t i = 0; i < n; ++i) {
    count_iteration();
    *position = i;
    fields.set("index", Value(i + 1));
    fields.set("index0", Value(i));
    fields.set("revindex", Value(n - i));
    fields.set("revindex0", Value(n - i - 1));
    fields.set("first", Value(i == 0));
    fields.set("last", Value(i + 1 == n));
    fields.set("previtem", i > 0 ? items[i - 1] : Value());
    fields.set("nextitem", i + 1 < n ? items[i + 1] : Value());
    bind_targets(s.targets, items[i], *loop_scope);
    if (exec_body(s.body, loop_scope) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Renderer::assign_attribute(const Expr& object_expr, const std::string& attribute, Value value,
                                const std::shared_ptr<Scope>& scope) {
  const Value obj = eval(object_expr, scope);
  if (!obj.is_object()) {
    throw EvalError("cannot set attribute '" + attribute + "' of a " + obj.type_name() +
                    " (only namespace() objects and dicts have settable attributes)");
  }
  obj.object().set(attribute, std::move(value));
}

void Renderer::exec_set(const SetStmt& s, const std::shared_ptr<Scope>& scope) {
  Value v = eval(*s.value, scope);
  if (s.attribute_of) {
    assign_attribute(*s.attribute_of, s.attribute, std::move(v), scope);
  } else {
    bind_targets(s.targets, v, *scope);
  }
}

void Renderer::exec_set_block(const SetBlockStmt& s, const std::shared_ptr<Scope>& scope) {
  Value v(capture(s.body, scope));
  for (const ExprPtr& f : s.filters) v = apply_filter_expr(static_cast<const FilterExpr&>(*f), v, scope);
  if (s.attribute_of) {
    assign_attribute(*s.attribute_of, s.attribute, std::move(v), scope);
  } else {
    scope->vars[s.target] = std::move(v);
  }
}

Value Renderer::make_macro(const std::vector<MacroParam>& params, const Body& body, const std::string& name,
                           const std::shared_ptr<Scope>& closure) {
  captured_->push_back(closure);
  return make_function(name, [this, &params, &body, closure](CallArgs& args) -> Value {
    auto scope = std::make_shared<Scope>();
    scope->parent = closure;
    Value kwargs = Value::new_object();
    for (size_t i = 0; i < params.size(); ++i) {
      const MacroParam& p = params[i];
      if (i < args.positional.size()) {
        scope->vars[p.name] = args.positional[i];
      } else if (const Value* v = args.named_arg(p.name)) {
        scope->vars[p.name] = *v;
      } else if (p.default_value) {
        scope->vars[p.name] = eval(*p.default_value, scope);
      } else {
        scope->vars[p.name] = Value();  // Jinja2 leaves a missing argument undefined
      }
    }
    Array extra;
    for (size_t i = params.size(); i < args.positional.size(); ++i) extra.push_back(args.positional[i]);
    for (const auto& [key, value] : args.named) {
      if (key == "caller") {
        scope->vars["caller"] = value;
        continue;
      }
      bool is_param = false;
      for (const MacroParam& p : params) is_param = is_param || p.name == key;
      if (!is_param) kwargs.object().set(key, value);
    }
    scope->vars["varargs"] = Value::new_array(std::move(extra));
    scope->vars["kwargs"] = kwargs;
    return Value(capture(body, scope));
  });
}

void Renderer::exec_call_block(const CallBlockStmt& s, const std::shared_ptr<Scope>& scope) {
  Value caller = make_macro(s.caller_params, s.body, "caller", scope);
  CallArgs args = eval_args(s.call->args, scope);
  args.named.emplace_back("caller", caller);
  const Value callee = eval(*s.call->callee, scope);
  const Value result = call(callee, args, describe_callee(*s.call->callee));
  emit(result.to_output());
}

Value Renderer::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  try {
    DepthGuard guard(this);
    return eval_inner(e, scope);
  } catch (const RaisedError& err) {
    throw LocatedError(e.pos, err.what(), true);
  } catch (const EvalError& err) {
    throw LocatedError(e.pos, err.what(), false);
  }
}

Value Renderer::eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return static_cast<const LiteralExpr&>(e).value;
    case ExprKind::kName: {
      const Value* v = scope->lookup(static_cast<const NameExpr&>(e).name);
      return v ? *v : Value();
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      const auto& seq = static_cast<const SequenceExpr&>(e);
      Array items;
      items.reserve(seq.items.size());
      for (const ExprPtr& item : seq.items) items.push_back(eval(*item, scope));
      return Value::new_array(std::move(items));
    }
    case ExprKind::kDict: {
      Value obj = Value::new_object();
      for (const auto& [key_expr, value_expr] : static_cast<const DictExpr&>(e).items) {
        const Value key = eval(*key_expr, scope);
        Value value = eval(*value_expr, scope);
        obj.object().set(key.is_string() ? key.str() : key.to_output(), std::move(value));
      }
      return obj;
    }
    case ExprKind::kAttribute: {
      const auto& a = static_cast<const AttributeExpr&>(e);
      return eval_attribute(eval(*a.object, scope), a.name);
    }
    case ExprKind::kIndex: {
      const auto& ix = static_cast<const IndexExpr&>(e);
      const Value obj = eval(*ix.object, scope);
      return eval_index(obj, eval(*ix.index, scope));
    }
    case ExprKind::kSlice:
      return eval_slice(static_cast<const SliceExpr&>(e), scope);
    case ExprKind::kCall:
      return eval_call(static_cast<const CallExpr&>(e), scope);
    case ExprKind::kFilter: {
      const auto& f = static_cast<const FilterExpr&>(e);
      return apply_filter_expr(f, eval(*f.operand, scope), scope);
    }
    case ExprKind::kTest: {
      const auto& t = static_cast<const TestExpr&>(e);
      const Value operand = eval(*t.operand, scope);
      CallArgs args = eval_args(t.args, scope);
      args.renderer = this;
      const bool result = apply_test(*this, t.name, operand, args);
      return Value(t.negated ? !result : result);
    }
    case ExprKind::kUnary: {
      const auto& u = static_cast<const UnaryExpr&>(e);
      const Value v = eval(*u.operand, scope);
      if (u.op == "not") return Value(!v.truthy());
      if (v.is_bool() || v.is_int()) {
        if (u.op == "+") return Value(integral(v));
        if (integral(v) == std::numeric_limits<int64_t>::min()) throw EvalError("integer overflow");
        return Value(-integral(v));
      }
      if (v.is_float()) return Value(u.op == "-" ? -v.float_value() : v.float_value());
      throw EvalError("bad operand type for unary " + u.op + ": " + v.type_name());
    }
    case ExprKind::kBinary:
      return eval_binary(static_cast<const BinaryExpr&>(e), scope);
    case ExprKind::kCompare:
      return Value(eval_compare(static_cast<const CompareExpr&>(e), scope));
    case ExprKind::kConditional: {
      const auto& c = static_cast<const ConditionalExpr&>(e);
      if (eval(*c.condition, scope).truthy()) return eval(*c.then_value, scope);
      return c.else_value ? eval(*c.else_value, scope) : Value();
    }
  }
  throw EvalError("unknown expression");
}

Value Renderer::eval_attribute(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::kObject: {
      const Object& o = obj.object();
      // Python's getattr comes before the item: d.items is the method even when d has an "items" key.
      if (!o.attributes_only() && is_dict_method(name)) return bound_method(obj, name);
      const Value* v = o.find(name);
      return v ? *v : Value();
    }
    case Value::Type::kString:
    case Value::Type::kArray:
      return bound_method(obj, name);
    default:
      return Value();
  }
}

Value Renderer::eval_index(const Value& obj, const Value& key) {
  switch (obj.type()) {
    case Value::Type::kObject: {
      const std::string k = key.is_string() ? key.str() : key.to_output();
      if (const Value* v = obj.object().find(k)) return *v;
      if (key.is_string() && !obj.object().attributes_only() && is_dict_method(k))
        return bound_method(obj, k);
      return Value();
    }
    case Value::Type::kArray: {
      if (key.is_string()) return bound_method(obj, key.str());
      if (!is_integral(key)) return Value();
      const Array& a = obj.array();
      int64_t i = integral(key);
      if (i < 0) i += static_cast<int64_t>(a.size());
      if (i < 0 || i >= static_cast<int64_t>(a.size())) return Value();
      return a[static_cast<size_t>(i)];
    }
    case Value::Type::kString: {
      if (key.is_string()) return bound_method(obj, key.str());
      if (!is_integral(key)) return Value();
      const auto chars = utf8_chars(obj.str());
      int64_t i = integral(key);
      if (i < 0) i += static_cast<int64_t>(chars.size());
      if (i < 0 || i >= static_cast<int64_t>(chars.size())) return Value();
      return Value(chars[static_cast<size_t>(i)]);
    }
    default:
      return Value();
  }
}

Value Renderer::eval_slice(const SliceExpr& e, const std::shared_ptr<Scope>& scope) {
  const Value obj = eval(*e.object, scope);
  const Value start = e.start ? eval(*e.start, scope) : Value();
  const Value stop = e.stop ? eval(*e.stop, scope) : Value();
  const Value step = e.step ? eval(*e.step, scope) : Value();
  if (obj.is_array()) {
    const Array& a = obj.array();
    Array out;
    for (size_t i : slice_indices(static_cast<int64_t>(a.size()), start, stop, step)) out.push_back(a[i]);
    return Value::new_array(std::move(out));
  }
  if (obj.is_string()) {
    const auto chars = utf8_chars(obj.str());
    std::string out;
    for (size_t i : slice_indices(static_cast<int64_t>(chars.size()), start, stop, step)) out += chars[i];
    return Value(std::move(out));
  }
  if (obj.is_undefined()) return Value();
  throw EvalError(std::string("cannot slice a ") + obj.type_name());
}

CallArgs Renderer::eval_args(const std::vector<Argument>& args, const std::shared_ptr<Scope>& scope) {
  CallArgs out;
  out.renderer = this;
  for (const Argument& a : args) {
    Value v = eval(*a.value, scope);
    switch (a.kind) {
      case Argument::Kind::kPositional:
        out.positional.push_back(std::move(v));
        break;
      case Argument::Kind::kKeyword:
        out.named.emplace_back(a.name, std::move(v));
        break;
      case Argument::Kind::kStar:
        if (!v.is_array()) throw EvalError(std::string("*args must be a list, not a ") + v.type_name());
        for (const Value& item : v.array()) out.positional.push_back(item);
        break;
      case Argument::Kind::kDoubleStar:
        if (!v.is_object()) throw EvalError(std::string("**kwargs must be a dict, not a ") + v.type_name());
        for (const auto& [key, item] : v.object().entries()) out.named.emplace_back(key, item);
        break;
    }
  }
  return out;
}

Value Renderer::eval_call(const CallExpr& e, const std::shared_ptr<Scope>& scope) {
  const Value callee = eval(*e.callee, scope);
  CallArgs args = eval_args(e.args, scope);
  return call(callee, args, describe_callee(*e.callee));
}

Value Renderer::apply_filter_expr(const FilterExpr& f, Value input, const std::shared_ptr<Scope>& scope) {
  CallArgs args = eval_args(f.args, scope);
  return apply_filter(*this, f.name, input, args);
}

Value Renderer::eval_binary(const BinaryExpr& e, const std::shared_ptr<Scope>& scope) {
  if (e.op == "and" || e.op == "or") {
    Value left = eval(*e.left, scope);
    if (left.truthy() == (e.op == "or")) return left;
    return eval(*e.right, scope);
  }
  const Value a = eval(*e.left, scope);
  const Value b = eval(*e.right, scope);
  if (e.op == "~") {
    std::string s = a.to_output() + b.to_output();
    check_string_size(s.size());
    return Value(std::move(s));
  }
  if (e.op == "+") {
    if (a.is_string() || b.is_string()) {
      // llama.cpp's leniency (Python raises): none/undefined next to a string add nothing, anything else adds
      // its printed form ("True", "{'k': 1}").
      auto text = [](const Value& v) -> std::string {
        if (v.is_undefined() || v.is_none()) return "";
        return v.to_output();
      };
      std::string s = text(a) + text(b);
      check_string_size(s.size());
      return Value(std::move(s));
    }
    if (a.is_array() && b.is_array()) {
      check_list_size(a.array().size() + b.array().size());
      Array items = a.array();
      items.insert(items.end(), b.array().begin(), b.array().end());
      return Value::new_array(std::move(items));
    }
    if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
      if (is_integral(a) && is_integral(b)) return Value(add_checked(integral(a), integral(b)));
      return Value(a.number() + b.number());
    }
    bad_operands("+", a, b);
  }
  if (e.op == "*") {
    const Value* seq = a.is_string() || a.is_array() ? &a : (b.is_string() || b.is_array() ? &b : nullptr);
    const Value* count = seq == &a ? &b : &a;
    if (seq && is_integral(*count)) {
      const int64_t times = std::max<int64_t>(0, integral(*count));
      if (seq->is_string()) {
        check_string_size(seq->str().size() * static_cast<size_t>(times));
        std::string s;
        for (int64_t i = 0; i < times; ++i) s += seq->str();
        return Value(std::move(s));
      }
      check_list_size(seq->array().size() * static_cast<size_t>(times));
      Array items;
      for (int64_t i = 0; i < times; ++i) items.insert(items.end(), seq->array().begin(), seq->array().end());
      return Value::new_array(std::move(items));
    }
  }
  return arithmetic(e.op, a, b);
}

bool Renderer::eval_compare(const CompareExpr& e, const std::shared_ptr<Scope>& scope) {
  Value left = eval(*e.first, scope);
  for (const auto& [op, expr] : e.rest) {
    Value right = eval(*expr, scope);
    bool ok;
    if (op == "==") {
      ok = values_equal(left, right);
    } else if (op == "!=") {
      ok = !values_equal(left, right);
    } else if (op == "<") {
      ok = value_less(left, right);
    } else if (op == ">") {
      ok = value_less(right, left);
    } else if (op == "<=") {
      ok = !value_less(right, left);
    } else if (op == ">=") {
      ok = !value_less(left, right);
    } else if (op == "in") {
      ok = contains(right, left);
    } else {
      ok = !contains(right, left);
    }
    if (!ok) return false;
    left = std::move(right);
  }
  return true;
}

}  // namespace df::jinja

#pragma once
// Evaluates a parsed template. Internal to the jinja engine: Template (jinja.h) is the public face.
#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace df::jinja {

// raise_exception() from the template itself.
class RaisedError : public EvalError {
 public:
  explicit RaisedError(const std::string& what) : EvalError(what) {}
};

// An evaluation error tied to the position of the node where it happened.
class LocatedError : public std::runtime_error {
 public:
  LocatedError(size_t pos, const std::string& what, bool raised)
      : std::runtime_error(what), pos(pos), raised(raised) {}
  size_t pos;
  bool raised;
};

struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;

  const Value* lookup(const std::string& name) const;
};

class Renderer {
 public:
  Renderer(const Body& program, const RenderOptions& options);

  std::string render(const nlohmann::ordered_json& context);

  // For the builtins.
  const RenderLimits& limits() const { return options_.limits; }
  std::time_t now() const;
  void check_list_size(size_t n) const;
  void check_string_size(size_t n) const;
  Value call(const Value& callee, CallArgs& args, const std::string& what);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  struct DepthGuard {
    explicit DepthGuard(Renderer* r);
    ~DepthGuard() { --renderer->depth_; }
    Renderer* renderer;
  };

  Flow exec_body(const Body& body, const std::shared_ptr<Scope>& scope);
  Flow exec(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Flow exec_for(const ForStmt& s, const std::shared_ptr<Scope>& scope);
  void exec_set(const SetStmt& s, const std::shared_ptr<Scope>& scope);
  void exec_set_block(const SetBlockStmt& s, const std::shared_ptr<Scope>& scope);
  void exec_call_block(const CallBlockStmt& s, const std::shared_ptr<Scope>& scope);
  std::string capture(const Body& body, const std::shared_ptr<Scope>& scope);
  void emit(std::string_view text);

  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_name(const NameExpr& e, const std::shared_ptr<Scope>& scope);
  Value eval_attribute(const Value& obj, const std::string& name);
  Value eval_index(const Value& obj, const Value& key);
  Value eval_slice(const SliceExpr& e, const std::shared_ptr<Scope>& scope);
  Value eval_call(const CallExpr& e, const std::shared_ptr<Scope>& scope);
  Value eval_binary(const BinaryExpr& e, const std::shared_ptr<Scope>& scope);
  bool eval_compare(const CompareExpr& e, const std::shared_ptr<Scope>& scope);
  CallArgs eval_args(const std::vector<Argument>& args, const std::shared_ptr<Scope>& scope);
  Value apply_filter_expr(const FilterExpr& f, Value input, const std::shared_ptr<Scope>& scope);

  Value make_macro(const std::vector<MacroParam>& params, const Body& body, const std::string& name,
                   const std::shared_ptr<Scope>& closure);

  void bind_targets(const std::vector<std::string>& targets, const Value& item, Scope& scope);
  void assign_attribute(const Expr& object_expr, const std::string& attribute, Value value,
                        const std::shared_ptr<Scope>& scope);

  const Body& program_;
  const RenderOptions& options_;
  std::string* out_ = nullptr;
  std::vector<std::shared_ptr<Scope>>* captured_ = nullptr;  // scopes held by macros, cut after the render
  int depth_ = 0;
  uint64_t iterations_ = 0;
};

}  // namespace df::jinja

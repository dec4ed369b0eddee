#pragma once
// The syntax tree of a parsed template. Every node records the byte offset it starts at, so that evaluation
// errors can name a line and column.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace df::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,
  kName,
  kList,
  kTuple,
  kDict,
  kAttribute,  // obj.name
  kIndex,      // obj[expr]
  kSlice,      // obj[a:b:c]
  kCall,
  kFilter,
  kTest,
  kUnary,
  kBinary,
  kCompare,
  kConditional,
};

struct Expr {
  Expr(ExprKind kind, size_t pos) : kind(kind), pos(pos) {}
  virtual ~Expr() = default;
  ExprKind kind;
  size_t pos;
};

struct LiteralExpr : Expr {
  LiteralExpr(size_t pos, Value v) : Expr(ExprKind::kLiteral, pos), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(size_t pos, std::string n) : Expr(ExprKind::kName, pos), name(std::move(n)) {}
  std::string name;
};

// List and tuple literals (tuples evaluate to lists).
struct SequenceExpr : Expr {
  SequenceExpr(ExprKind kind, size_t pos) : Expr(kind, pos) {}
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(size_t pos) : Expr(ExprKind::kDict, pos) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct AttributeExpr : Expr {
  AttributeExpr(size_t pos, ExprPtr obj, std::string n)
      : Expr(ExprKind::kAttribute, pos), object(std::move(obj)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct IndexExpr : Expr {
  IndexExpr(size_t pos, ExprPtr obj, ExprPtr idx)
      : Expr(ExprKind::kIndex, pos), object(std::move(obj)), index(std::move(idx)) {}
  ExprPtr object;
  ExprPtr index;
};

struct SliceExpr : Expr {
  SliceExpr(size_t pos, ExprPtr obj) : Expr(ExprKind::kSlice, pos), object(std::move(obj)) {}
  ExprPtr object;
  ExprPtr start, stop, step;  // null when omitted
};

struct Argument {
  enum class Kind { kPositional, kKeyword, kStar, kDoubleStar };
  Kind kind = Kind::kPositional;
  std::string name;  // for keywords
  ExprPtr value;
};

struct CallExpr : Expr {
  CallExpr(size_t pos, ExprPtr c) : Expr(ExprKind::kCall, pos), callee(std::move(c)) {}
  ExprPtr callee;
  std::vector<Argument> args;
};

// value | name(args); operand is null inside {% filter %} blocks, where the block's output is the input.
struct FilterExpr : Expr {
  FilterExpr(size_t pos, ExprPtr operand, std::string n)
      : Expr(ExprKind::kFilter, pos), operand(std::move(operand)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  std::vector<Argument> args;
};

struct TestExpr : Expr {
  TestExpr(size_t pos, ExprPtr operand, std::string n, bool negated)
      : Expr(ExprKind::kTest, pos), operand(std::move(operand)), name(std::move(n)), negated(negated) {}
  ExprPtr operand;
  std::string name;
  bool negated;
  std::vector<Argument> args;
};

struct UnaryExpr : Expr {
  UnaryExpr(size_t pos, std::string o, ExprPtr e)
      : Expr(ExprKind::kUnary, pos), op(std::move(o)), operand(std::move(e)) {}
  std::string op;  // "not", "-", "+"
  ExprPtr operand;
};

struct BinaryExpr : Expr {
  BinaryExpr(size_t pos, std::string o, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::kBinary, pos), op(std::move(o)), left(std::move(l)), right(std::move(r)) {}
  std::string op;  // and or + - * / // % ** ~
  ExprPtr left;
  ExprPtr right;
};

// a < b <= c, in, not in: Python's chained comparison.
struct CompareExpr : Expr {
  CompareExpr(size_t pos, ExprPtr first) : Expr(ExprKind::kCompare, pos), first(std::move(first)) {}
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;
};

struct ConditionalExpr : Expr {
  explicit ConditionalExpr(size_t pos) : Expr(ExprKind::kConditional, pos) {}
  ExprPtr condition;
  ExprPtr then_value;
  ExprPtr else_value;  // null: undefined when the condition is false
};

enum class StmtKind {
  kText,
  kOutput,
  kIf,
  kFor,
  kSet,
  kSetBlock,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kBreak,
  kContinue,
  kDo,
};

struct Stmt {
  Stmt(StmtKind kind, size_t pos) : kind(kind), pos(pos) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  size_t pos;
};

struct TextStmt : Stmt {
  TextStmt(size_t pos, std::string t) : Stmt(StmtKind::kText, pos), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {
  OutputStmt(size_t pos, ExprPtr e) : Stmt(StmtKind::kOutput, pos), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(size_t pos) : Stmt(StmtKind::kIf, pos) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body else_body;
};

// Loop targets: one name, or several for unpacking ("for k, v in ...").
struct ForStmt : Stmt {
  explicit ForStmt(size_t pos) : Stmt(StmtKind::kFor, pos) {}
  std::vector<std::string> targets;
  ExprPtr iterable;
  ExprPtr filter;  // "for x in xs if cond"
  Body body;
  Body else_body;
};

// {% set a = v %}, {% set a, b = v %} or {% set ns.attr = v %} (attribute_of set).
struct SetStmt : Stmt {
  explicit SetStmt(size_t pos) : Stmt(StmtKind::kSet, pos) {}
  std::vector<std::string> targets;
  ExprPtr attribute_of;
  std::string attribute;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(size_t pos) : Stmt(StmtKind::kSetBlock, pos) {}
  std::string target;
  ExprPtr attribute_of;
  std::string attribute;
  std::vector<ExprPtr> filters;  // FilterExpr chain with null operands, applied in order
  Body body;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct MacroStmt : Stmt {
  explicit MacroStmt(size_t pos) : Stmt(StmtKind::kMacro, pos) {}
  std::string name;
  std::vector<MacroParam> params;
  Body body;
};

// {% call(params) callee(args) %}body{% endcall %}: callee gets a `caller` that renders body.
struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(size_t pos) : Stmt(StmtKind::kCallBlock, pos) {}
  std::unique_ptr<CallExpr> call;
  std::vector<MacroParam> caller_params;
  Body body;
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(size_t pos) : Stmt(StmtKind::kFilterBlock, pos) {}
  std::vector<ExprPtr> filters;
  Body body;
};

struct SimpleStmt : Stmt {
  SimpleStmt(StmtKind kind, size_t pos) : Stmt(kind, pos) {}
};

struct DoStmt : Stmt {
  DoStmt(size_t pos, ExprPtr e) : Stmt(StmtKind::kDo, pos), expr(std::move(e)) {}
  ExprPtr expr;
};

}  // namespace df::jinja

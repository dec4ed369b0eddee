#include "tokenizer/jinja_parser.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>

namespace df::jinja {
namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText:
      return "text";
    case TokenKind::kVarBegin:
    case TokenKind::kVarEnd:
    case TokenKind::kBlockBegin:
    case TokenKind::kBlockEnd:
    case TokenKind::kOperator:
      return "'" + t.text + "'";
    case TokenKind::kName:
      return "name '" + t.text + "'";
    case TokenKind::kString:
      return "a string";
    case TokenKind::kInt:
    case TokenKind::kFloat:
      return "number " + t.text;
    case TokenKind::kEof:
      return "the end of the template";
  }
  return "?";
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  Body parse() {
    Body body = parse_body({}, nullptr, 0, "");
    if (peek().kind != TokenKind::kEof) fail(peek(), "unexpected " + describe(peek()));
    return body;
  }

 private:
  // ---- token helpers
  // -----------------------------------------------------------------------------------------

  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(cur_ + ahead, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (cur_ < tokens_.size() - 1) ++cur_;
    return t;
  }
  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] static void fail(const Token& at, const std::string& message) {
    throw SyntaxError(at.pos, message);
  }
  void expect_op(std::string_view op, std::string_view context) {
    if (!skip_op(op))
      fail(peek(),
           "expected '" + std::string(op) + "' " + std::string(context) + ", got " + describe(peek()));
  }
  std::string expect_name(std::string_view context) {
    if (peek().kind != TokenKind::kName)
      fail(peek(), "expected a name " + std::string(context) + ", got " + describe(peek()));
    return next().text;
  }
  void expect_block_end(std::string_view tag) {
    if (peek().kind != TokenKind::kBlockEnd) {
      fail(peek(), "expected '%}' to end the '" + std::string(tag) + "' tag, got " + describe(peek()));
    }
    next();
  }

  struct DepthGuard {
    DepthGuard(Parser* p, size_t pos) : parser(p) {
      if (++parser->depth_ > kMaxParseNesting) {
        throw SyntaxError(
            pos, "template nests too deeply (more than " + std::to_string(kMaxParseNesting) + " levels)");
      }
    }
    ~DepthGuard() { --parser->depth_; }
    Parser* parser;
  };

  // A chain like a + b + c or x.a.b builds a left-deep tree whose height is the chain's length; each link
  // counts as one level of nesting so that the tree (and the evaluator's and destructor's recursion over it)
  // stays shallow.
  struct ChainGuard {
    explicit ChainGuard(Parser* p) : parser(p) {}
    void link(size_t pos) {
      ++links;
      if (++parser->depth_ > kMaxParseNesting) {
        throw SyntaxError(
            pos, "expression nests too deeply (more than " + std::to_string(kMaxParseNesting) + " levels)");
      }
    }
    ~ChainGuard() { parser->depth_ -= links; }
    Parser* parser;
    int links = 0;
  };

  // ---- statements
  // ----------------------------------------------------------------------------------------------

  // Parses until "{% name" with name in `terminators` (consumes "{%" and the name and reports it) or the end
  // of the template (an error when a terminator was expected: the block opened at open_pos is not closed).
  Body parse_body(std::initializer_list<std::string_view> terminators, std::string* terminator,
                  size_t open_pos, std::string_view open_tag) {
    Body body;
    while (true) {
      const Token& t = peek();
      switch (t.kind) {
        case TokenKind::kEof:
          if (terminators.size() == 0) return body;
          throw SyntaxError(open_pos, "'" + std::string(open_tag) + "' block is never closed (expected '{% " +
                                          std::string(*(terminators.end() - 1)) + " %}')");
        case TokenKind::kText:
          body.push_back(std::make_unique<TextStmt>(t.pos, t.text));
          next();
          break;
        case TokenKind::kVarBegin: {
          next();
          ExprPtr e = parse_tuple(true, false);
          if (peek().kind != TokenKind::kVarEnd) fail(peek(), "expected '}}', got " + describe(peek()));
          next();
          body.push_back(std::make_unique<OutputStmt>(t.pos, std::move(e)));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = peek(1);
          if (name.kind == TokenKind::kName &&
              std::find(terminators.begin(), terminators.end(), name.text) != terminators.end()) {
            next();
            *terminator = next().text;
            return body;
          }
          next();
          if (StmtPtr s = parse_statement(t.pos, open_tag)) body.push_back(std::move(s));
          break;
        }
        default:
          fail(t, "unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement(size_t pos, std::string_view enclosing) {
    DepthGuard guard(this, pos);
    if (peek().kind != TokenKind::kName)
      fail(peek(), "expected a tag name after '{%', got " + describe(peek()));
    const std::string tag = next().text;
    if (tag == "if") return parse_if(pos);
    if (tag == "for") return parse_for(pos);
    if (tag == "set") return parse_set(pos);
    if (tag == "macro") return parse_macro(pos);
    if (tag == "call") return parse_call_block(pos);
    if (tag == "filter") return parse_filter_block(pos);
    if (tag == "do") {
      auto s = std::make_unique<DoStmt>(pos, parse_tuple(true, false));
      expect_block_end(tag);
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) throw SyntaxError(pos, "'" + tag + "' outside of a for loop");
      expect_block_end(tag);
      return std::make_unique<SimpleStmt>(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, pos);
    }
    if (tag == "generation" || tag == "endgeneration") {
      // transformers' marker of assistant spans for training masks; it renders nothing.
      expect_block_end(tag);
      return nullptr;
    }
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block") {
      throw SyntaxError(pos, "'" + tag + "' is not supported: a chat template must be self-contained");
    }
    std::string message = "unknown or unexpected tag '" + tag + "'";
    if (!enclosing.empty()) message += " inside a '" + std::string(enclosing) + "' block";
    throw SyntaxError(pos, message);
  }

  StmtPtr parse_if(size_t pos) {
    auto s = std::make_unique<IfStmt>(pos);
    ExprPtr cond = parse_expression(true);
    expect_block_end("if");
    while (true) {
      std::string term;
      Body body = parse_body({"elif", "else", "endif"}, &term, pos, "if");
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (term == "elif") {
        cond = parse_expression(true);
        expect_block_end("elif");
        continue;
      }
      expect_block_end(term);
      if (term == "else") {
        s->else_body = parse_body({"endif"}, &term, pos, "if");
        expect_block_end("endif");
      }
      return s;
    }
  }

  std::vector<std::string> parse_target_names(std::string_view context) {
    std::vector<std::string> names;
    const bool parens = skip_op("(");
    do {
      if (parens && is_op(")")) break;
      names.push_back(expect_name(context));
    } while (skip_op(","));
    if (parens) expect_op(")", context);
    return names;
  }

  StmtPtr parse_for(size_t pos) {
    auto s = std::make_unique<ForStmt>(pos);
    s->targets = parse_target_names("as the loop variable");
    if (!skip_name("in")) fail(peek(), "expected 'in' in the 'for' tag, got " + describe(peek()));
    s->iterable = parse_tuple(false, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name("recursive")) fail(peek(), "recursive for loops are not supported");
    expect_block_end("for");
    ++loop_depth_;
    std::string term;
    s->body = parse_body({"else", "endfor"}, &term, pos, "for");
    --loop_depth_;
    expect_block_end(term);
    if (term == "else") {
      s->else_body = parse_body({"endfor"}, &term, pos, "for");
      expect_block_end("endfor");
    }
    return s;
  }

  StmtPtr parse_set(size_t pos) {
    // Target: name, name.attr (namespace assignment) or several names to unpack into.
    std::vector<std::string> names;
    ExprPtr attribute_of;
    std::string attribute;
    if (peek().kind == TokenKind::kName && is_op(".", 1)) {
      const Token& obj = next();
      attribute_of = std::make_unique<NameExpr>(obj.pos, obj.text);
      next();
      attribute = expect_name("after '.' in the 'set' target");
    } else {
      names = parse_target_names("as the 'set' target");
    }
    if (skip_op("=")) {
      auto s = std::make_unique<SetStmt>(pos);
      s->targets = std::move(names);
      s->attribute_of = std::move(attribute_of);
      s->attribute = std::move(attribute);
      s->value = parse_tuple(true, false);
      expect_block_end("set");
      return s;
    }
    if (names.size() > 1) fail(peek(), "a block 'set' assigns to one name, expected '='");
    auto s = std::make_unique<SetBlockStmt>(pos);
    if (!names.empty()) s->target = names[0];
    s->attribute_of = std::move(attribute_of);
    s->attribute = std::move(attribute);
    while (skip_op("|")) s->filters.push_back(parse_filter(nullptr));
    expect_block_end("set");
    std::string term;
    s->body = parse_body({"endset"}, &term, pos, "set");
    expect_block_end("endset");
    return s;
  }

  std::vector<MacroParam> parse_params(std::string_view context) {
    std::vector<MacroParam> params;
    expect_op("(", context);
    while (!is_op(")")) {
      MacroParam p;
      p.name = expect_name(context);
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
      if (!skip_op(",")) break;
    }
    expect_op(")", context);
    return params;
  }

  StmtPtr parse_macro(size_t pos) {
    auto s = std::make_unique<MacroStmt>(pos);
    s->name = expect_name("after 'macro'");
    s->params = parse_params("in the macro's parameter list");
    expect_block_end("macro");
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::string term;
    s->body = parse_body({"endmacro"}, &term, pos, "macro");
    loop_depth_ = saved_loops;
    expect_block_end("endmacro");
    return s;
  }

  StmtPtr parse_call_block(size_t pos) {
    auto s = std::make_unique<CallBlockStmt>(pos);
    if (is_op("(")) s->caller_params = parse_params("in the caller's parameter list");
    ExprPtr e = parse_expression(true);
    if (e->kind != ExprKind::kCall)
      throw SyntaxError(e->pos, "the 'call' tag needs a macro call, like {% call m() %}");
    s->call.reset(static_cast<CallExpr*>(e.release()));
    expect_block_end("call");
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::string term;
    s->body = parse_body({"endcall"}, &term, pos, "call");
    loop_depth_ = saved_loops;
    expect_block_end("endcall");
    return s;
  }

  StmtPtr parse_filter_block(size_t pos) {
    auto s = std::make_unique<FilterBlockStmt>(pos);
    do {
      s->filters.push_back(parse_filter(nullptr));
    } while (skip_op("|"));
    expect_block_end("filter");
    std::string term;
    s->body = parse_body({"endfilter"}, &term, pos, "filter");
    expect_block_end("endfilter");
    return s;
  }

  // ---- expressions
  // ---------------------------------------------------------------------------------------------

  // Expressions separated by commas form a tuple; a single one stands for itself.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens) {
    const size_t pos = peek().pos;
    if (explicit_parens && is_op(")")) return std::make_unique<SequenceExpr>(ExprKind::kTuple, pos);
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto tuple = std::make_unique<SequenceExpr>(ExprKind::kTuple, pos);
    tuple->items.push_back(std::move(first));
    while (skip_op(",")) {
      const TokenKind k = peek().kind;
      if (k == TokenKind::kVarEnd || k == TokenKind::kBlockEnd || k == TokenKind::kEof || is_op(")")) break;
      tuple->items.push_back(parse_expression(with_condexpr));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_conditional() : parse_or(); }

  ExprPtr parse_conditional() {
    ExprPtr e = parse_or();
    ChainGuard chain(this);
    while (is_name("if")) {
      chain.link(peek().pos);
      auto c = std::make_unique<ConditionalExpr>(next().pos);
      c->condition = parse_or();
      if (skip_name("else")) c->else_value = parse_conditional();
      c->then_value = std::move(e);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    ChainGuard chain(this);
    while (is_name("or")) {
      const size_t pos = next().pos;
      chain.link(pos);
      e = std::make_unique<BinaryExpr>(pos, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    ChainGuard chain(this);
    while (is_name("and")) {
      const size_t pos = next().pos;
      chain.link(pos);
      e = std::make_unique<BinaryExpr>(pos, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const size_t pos = next().pos;
      DepthGuard guard(this, pos);
      return std::make_unique<UnaryExpr>(pos, "not", parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    std::unique_ptr<CompareExpr> cmp;
    while (true) {
      std::string op;
      const Token& t = peek();
      if (t.kind == TokenKind::kOperator && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                             t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) cmp = std::make_unique<CompareExpr>(t.pos, std::move(first));
      cmp->rest.emplace_back(op, parse_math1());
    }
    if (cmp) return cmp;
    return first;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    ChainGuard chain(this);
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      chain.link(t.pos);
      e = std::make_unique<BinaryExpr>(t.pos, t.text, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    ChainGuard chain(this);
    while (is_op("~")) {
      const size_t pos = next().pos;
      chain.link(pos);
      e = std::make_unique<BinaryExpr>(pos, "~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    ChainGuard chain(this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      chain.link(t.pos);
      e = std::make_unique<BinaryExpr>(t.pos, t.text, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    ChainGuard chain(this);
    while (is_op("**")) {
      const size_t pos = next().pos;
      chain.link(pos);
      e = std::make_unique<BinaryExpr>(pos, "**", std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this, peek().pos);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = std::make_unique<UnaryExpr>(t.pos, t.text, parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filter_chain(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::kName: {
        next();
        if (t.text == "true" || t.text == "True") return std::make_unique<LiteralExpr>(t.pos, Value(true));
        if (t.text == "false" || t.text == "False") return std::make_unique<LiteralExpr>(t.pos, Value(false));
        if (t.text == "none" || t.text == "None") return std::make_unique<LiteralExpr>(t.pos, Value::none());
        return std::make_unique<NameExpr>(t.pos, t.text);
      }
      case TokenKind::kString: {
        std::string s;
        while (peek().kind == TokenKind::kString) s += next().text;  // adjacent literals concatenate
        return std::make_unique<LiteralExpr>(t.pos, Value(std::move(s)));
      }
      case TokenKind::kInt:
        next();
        return std::make_unique<LiteralExpr>(t.pos, Value(t.int_value));
      case TokenKind::kFloat:
        next();
        return std::make_unique<LiteralExpr>(t.pos, Value(t.float_value));
      case TokenKind::kOperator:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, true);
          expect_op(")", "to close '('");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail(t, "expected an expression, got " + describe(t));
  }

  ExprPtr parse_list() {
    auto list = std::make_unique<SequenceExpr>(ExprKind::kList, next().pos);
    while (!is_op("]")) {
      list->items.push_back(parse_expression(true));
      if (!skip_op(",")) break;
    }
    expect_op("]", "to close the list");
    return list;
  }

  ExprPtr parse_dict() {
    auto dict = std::make_unique<DictExpr>(next().pos);
    while (!is_op("}")) {
      ExprPtr key = parse_expression(true);
      expect_op(":", "after a dict key");
      dict->items.emplace_back(std::move(key), parse_expression(true));
      if (!skip_op(",")) break;
    }
    expect_op("}", "to close the dict");
    return dict;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    ChainGuard chain(this);
    while (true) {
      if (is_op(".") || is_op("[") || is_op("(")) chain.link(peek().pos);
      if (is_op(".")) {
        const size_t pos = next().pos;
        const Token& t = peek();
        if (t.kind == TokenKind::kName) {
          e = std::make_unique<AttributeExpr>(pos, std::move(e), next().text);
        } else if (t.kind == TokenKind::kInt) {
          next();
          e = std::make_unique<IndexExpr>(pos, std::move(e),
                                          std::make_unique<LiteralExpr>(t.pos, Value(t.int_value)));
        } else {
          fail(t, "expected an attribute name after '.', got " + describe(t));
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    const size_t pos = next().pos;
    ExprPtr parts[3];
    int colons = 0;
    while (true) {
      if (is_op("]")) break;
      if (is_op(":")) {
        if (++colons > 2) fail(peek(), "a slice has at most two ':'");
        next();
        continue;
      }
      if (parts[colons]) fail(peek(), "expected ':' or ']' in the subscript, got " + describe(peek()));
      parts[colons] = parse_expression(true);
    }
    expect_op("]", "to close the subscript");
    if (colons == 0) {
      if (!parts[0]) throw SyntaxError(pos, "empty subscript '[]'");
      return std::make_unique<IndexExpr>(pos, std::move(obj), std::move(parts[0]));
    }
    auto s = std::make_unique<SliceExpr>(pos, std::move(obj));
    s->start = std::move(parts[0]);
    s->stop = std::move(parts[1]);
    s->step = std::move(parts[2]);
    return s;
  }

  std::vector<Argument> parse_args() {
    std::vector<Argument> args;
    expect_op("(", "to start the arguments");
    while (!is_op(")")) {
      Argument a;
      if (skip_op("**")) {
        a.kind = Argument::Kind::kDoubleStar;
      } else if (skip_op("*")) {
        a.kind = Argument::Kind::kStar;
      } else if (peek().kind == TokenKind::kName && is_op("=", 1)) {
        a.kind = Argument::Kind::kKeyword;
        a.name = next().text;
        next();
      }
      a.value = parse_expression(true);
      args.push_back(std::move(a));
      if (!skip_op(",")) break;
    }
    expect_op(")", "to close the arguments");
    return args;
  }

  ExprPtr parse_call(ExprPtr callee) {
    const size_t pos = callee->pos;
    auto call = std::make_unique<CallExpr>(pos, std::move(callee));
    call->args = parse_args();
    return call;
  }

  std::string parse_dotted_name(std::string_view context) {
    std::string name = expect_name(context);
    while (skip_op(".")) {
      name += '.';
      name += expect_name(context);
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr operand) {
    const size_t pos = peek().pos;
    auto f = std::make_unique<FilterExpr>(pos, std::move(operand), parse_dotted_name("as a filter name"));
    if (is_op("(")) f->args = parse_args();
    return f;
  }

  ExprPtr parse_filter_chain(ExprPtr e) {
    ChainGuard chain(this);
    while (true) {
      if (is_op("|") || is_name("is") || is_op("(")) chain.link(peek().pos);
      if (skip_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        const size_t pos = next().pos;
        const bool negated = skip_name("not");
        auto t = std::make_unique<TestExpr>(pos, std::move(e), parse_dotted_name("as a test name"), negated);
        const Token& n = peek();
        static constexpr std::string_view kNotArguments[] = {"else", "or", "and", "if", "in", "not", "is"};
        const bool takes_bare_argument =
            n.kind == TokenKind::kString || n.kind == TokenKind::kInt || n.kind == TokenKind::kFloat ||
            is_op("[") || is_op("{") ||
            (n.kind == TokenKind::kName && std::find(std::begin(kNotArguments), std::end(kNotArguments),
                                                     n.text) == std::end(kNotArguments));
        if (is_op("(")) {
          t->args = parse_args();
        } else if (takes_bare_argument) {
          Argument a;
          a.value = parse_postfix(parse_primary());
          t->args.push_back(std::move(a));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& tokens_;
  size_t cur_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens) { return Parser(tokens).parse(); }

}  // namespace df::jinja

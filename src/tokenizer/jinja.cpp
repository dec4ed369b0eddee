#include "tokenizer/jinja.h"

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_renderer.h"
#include "util/error.h"

namespace df::jinja {

struct Program {
  std::string name;
  std::string source;  // normalized: what positions refer to
  Body body;
};

Template::Template(std::string_view source, std::string name) {
  auto program = std::make_shared<Program>();
  program->name = std::move(name);
  program->source = normalize_template_source(source);
  try {
    program->body = parse_template(tokenize_template(program->source));
  } catch (const SyntaxError& e) {
    fail("{}: syntax error at {}: {}", program->name, describe_position(program->source, e.pos), e.what());
  }
  program_ = std::move(program);
}

const std::string& Template::name() const { return program_->name; }

const std::string& Template::source() const { return program_->source; }

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  try {
    Renderer renderer(program_->body, options);
    return renderer.render(context);
  } catch (const LocatedError& e) {
    fail("{}: {} at {}: {}", program_->name, e.raised ? "raise_exception()" : "error",
         describe_position(program_->source, e.pos), e.what());
  } catch (const EvalError& e) {
    fail("{}: error: {}", program_->name, e.what());
  }
}

}  // namespace df::jinja

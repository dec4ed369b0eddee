#pragma once
// Parses template tokens into a syntax tree with Jinja2's grammar and operator precedence.
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace df::jinja {

// How deeply expressions and blocks may nest; deeper input is refused with a SyntaxError rather than risking
// the parser's (and later the evaluator's) stack.
inline constexpr int kMaxParseNesting = 100;

// Throws SyntaxError.
Body parse_template(const std::vector<Token>& tokens);

}  // namespace df::jinja

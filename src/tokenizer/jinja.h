#pragma once
// A Jinja2 interpreter for chat templates (the text of a GGUF's tokenizer.chat_template), written to render
// them as llama.cpp's engine does. Semantics are Jinja2's (Python's), with llama.cpp's choices where they
// differ:
//   * trim_blocks and lstrip_blocks are on, a single trailing newline of the template is dropped;
//   * tojson writes Python json.dumps separators (", " / ": ", or "," with an indent), keeps dict insertion
//   order
//     and leaves non-ASCII text unescaped (ensure_ascii=False);
//   * undefined is lenient: it prints as nothing, its attributes and items are undefined, it iterates as
//   empty,
//     and none/undefined + string concatenates as an empty string;
//   * strings are UTF-8: lengths, indices and slices count code points; case mapping and the default
//   whitespace of
//     strip/split are ASCII-only.
// Not supported: include/import/extends/block, recursive loops, autoescape, the % string operator.
#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace df::jinja {

// Bounds that keep a hostile template from exhausting the stack, memory or time; exceeding one is an error.
struct RenderLimits {
  int max_depth = 400;                         // nested evaluation, macro recursion included
  uint64_t max_loop_iterations = 1'000'000;    // for-loop iterations in one render
  size_t max_string_bytes = size_t{64} << 20;  // the output and any string built on the way
  size_t max_list_items = size_t{1} << 20;     // any list built on the way (range(), +, *)
  size_t max_containers = size_t{4} << 20;     // lists and dicts made in one render
};

struct RenderOptions {
  std::optional<std::time_t> now;  // the clock of strftime_now() (local time); unset: the current time
  RenderLimits limits;
};

struct Program;

class Template {
 public:
  // Parses `source`. Throws df::Error "<name>: syntax error at line L, column C: ..." on a malformed
  // template.
  explicit Template(std::string_view source, std::string name = "template");

  // Renders with the variables of `context` (a JSON object). Throws df::Error naming the line and column of
  // the failing expression, or the message of the template's raise_exception().
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

  const std::string& name() const;
  const std::string& source() const;  // normalized (LF newlines, no trailing newline)

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace df::jinja

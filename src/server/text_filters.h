#pragma once
// Filters over the generated text as it streams out, each holding back only what it must:
// - StopMatcher: the request's stop strings are never emitted; a tail that may be the start of one is held
//   back until the next text decides it.
// - ReasoningSplitter: the text between the think markers goes to reasoning, the rest to content (or all of
//   it to content, as --reasoning-format none asks).
#include <string>
#include <string_view>
#include <vector>

namespace df::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});
  // Appends generated text; returns what can be emitted now. Once a stop string appears, the text before it
  // is returned, the rest is dropped and stopped() is true (later pushes return nothing).
  std::string push(std::string_view text);
  // Generation ended for another reason: the held-back tail, which turned out not to be a stop string.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

struct SplitText {
  std::string content, reasoning;
  bool empty() const { return content.empty() && reasoning.empty(); }
};

class ReasoningSplitter {
 public:
  // extract: false keeps everything inline (content). in_reasoning: the prompt opened a think block.
  ReasoningSplitter(bool extract, bool in_reasoning, std::string open = "<think>",
                    std::string close = "</think>");
  SplitText push(std::string_view text);
  SplitText flush();

 private:
  void emit(SplitText& out, std::string_view text);
  bool extract_, in_reasoning_;
  bool strip_newlines_ = false;  // right after a marker: the template's newline is not part of either text
  std::string open_, close_, pending_;
};

// The length of the longest proper prefix of `marker` that `text` ends with.
size_t partial_suffix(std::string_view text, std::string_view marker);

}  // namespace df::server

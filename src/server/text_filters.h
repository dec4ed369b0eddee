#pragma once
// Filters over the generated text as it streams out, each holding back only what it must:
// - StopMatcher: the request's stop strings are never emitted; a tail that may be the start of one is held
//   back until the next text decides it.
// - ReasoningSplitter: the text in a reasoning block (think markers, or gpt-oss's analysis channel) goes to
//   reasoning, the rest to content (or all of it to content, as --reasoning-format none asks).
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

// Where the generated text goes after each marker of a model's reasoning format. A marker applies in the
// modes it names and is never emitted itself.
struct ReasoningMarker {
  enum class To { Reasoning, Content };
  std::string text;
  To to;
  bool in_content = true, in_reasoning = true;  // the modes in which the marker is recognised
};
struct ReasoningFormat {
  std::vector<ReasoningMarker> markers;
  // After a marker, newlines belong to neither text (think templates put one there).
  bool strip_newlines = false;
  // <think> ... </think> (qwen3, LFM2.5): the block is reasoning.
  static ReasoningFormat think();
  // gpt-oss's harmony channels: after <|channel|>analysis<|message|> reasoning, after the final (or
  // commentary) channel's header content; the message separators <|end|> and <|start|>assistant are dropped.
  static ReasoningFormat harmony();
  // Gemma 4: <|channel>thought opens the reasoning, <channel|> closes it.
  static ReasoningFormat gemma4();
};

class ReasoningSplitter {
 public:
  // extract: false keeps everything inline (content), markers included. in_reasoning: the prompt opened a
  // reasoning block.
  ReasoningSplitter(bool extract, bool in_reasoning, ReasoningFormat format = ReasoningFormat::think());
  SplitText push(std::string_view text);
  SplitText flush();

 private:
  void emit(SplitText& out, std::string_view text);
  bool applies(const ReasoningMarker& m) const { return in_reasoning_ ? m.in_reasoning : m.in_content; }
  bool extract_, in_reasoning_;
  bool strip_newlines_ = false;  // right after a marker (when the format strips them)
  ReasoningFormat format_;
  std::string pending_;
};

// The length of the longest proper prefix of `marker` that `text` ends with.
size_t partial_suffix(std::string_view text, std::string_view marker);

}  // namespace df::server

#include "server/text_filters.h"

#include <algorithm>

namespace df::server {

size_t partial_suffix(std::string_view text, std::string_view marker) {
  for (size_t k = std::min(text.size(), marker.size() - (marker.empty() ? 0 : 1)); k > 0; --k)
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    std::string out = pending_.substr(0, first);
    pending_.clear();
    stopped_ = true;
    return out;
  }
  size_t hold = 0;
  for (const auto& s : stops_) hold = std::max(hold, partial_suffix(pending_, s));
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  pending_.clear();
  return out;
}

ReasoningFormat ReasoningFormat::think() {
  using To = ReasoningMarker::To;
  ReasoningFormat f;
  f.markers = {{"<think>", To::Reasoning, true, false}, {"</think>", To::Content, false, true}};
  f.strip_newlines = true;
  return f;
}

ReasoningFormat ReasoningFormat::harmony() {
  using To = ReasoningMarker::To;
  ReasoningFormat f;
  f.markers = {{"<|channel|>analysis<|message|>", To::Reasoning},
               {"<|channel|>final<|message|>", To::Content},
               {"<|channel|>commentary<|message|>", To::Content},
               // Between two messages: where the next goes is the next header's to say.
               {"<|end|>", To::Content},
               {"<|start|>assistant", To::Content}};
  return f;
}

ReasoningFormat ReasoningFormat::gemma4() {
  using To = ReasoningMarker::To;
  ReasoningFormat f;
  f.markers = {{"<|channel>thought", To::Reasoning, true, false}, {"<channel|>", To::Content, false, true}};
  f.strip_newlines = true;  // the header's newline, and the one a template may put after the channel
  return f;
}

ReasoningSplitter::ReasoningSplitter(bool extract, bool in_reasoning, ReasoningFormat format)
    : extract_(extract),
      in_reasoning_(extract && in_reasoning),
      strip_newlines_(extract && in_reasoning && format.strip_newlines),
      format_(std::move(format)) {}

void ReasoningSplitter::emit(SplitText& out, std::string_view text) {
  if (strip_newlines_) {
    while (!text.empty() && text.front() == '\n') text.remove_prefix(1);
    if (text.empty()) return;
    strip_newlines_ = false;
  }
  (in_reasoning_ ? out.reasoning : out.content).append(text);
}

SplitText ReasoningSplitter::push(std::string_view text) {
  SplitText out;
  if (!extract_) {
    out.content.assign(text);
    return out;
  }
  pending_.append(text);
  while (true) {
    // The earliest marker that applies in the current mode.
    const ReasoningMarker* first = nullptr;
    size_t at = std::string::npos;
    for (const ReasoningMarker& m : format_.markers) {
      if (!applies(m)) continue;
      const size_t pos = pending_.find(m.text);
      if (pos < at) {
        at = pos;
        first = &m;
      }
    }
    if (!first) break;
    emit(out, std::string_view(pending_).substr(0, at));
    pending_.erase(0, at + first->text.size());
    in_reasoning_ = first->to == ReasoningMarker::To::Reasoning;
    strip_newlines_ = format_.strip_newlines;
  }
  size_t hold = 0;
  for (const ReasoningMarker& m : format_.markers)
    if (applies(m)) hold = std::max(hold, partial_suffix(pending_, m.text));
  emit(out, std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

SplitText ReasoningSplitter::flush() {
  SplitText out;
  std::string rest;
  rest.swap(pending_);
  emit(out, rest);
  return out;
}

}  // namespace df::server

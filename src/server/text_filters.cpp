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

ReasoningSplitter::ReasoningSplitter(bool extract, bool in_reasoning, std::string open, std::string close)
    : extract_(extract),
      in_reasoning_(extract && in_reasoning),
      strip_newlines_(extract && in_reasoning),
      open_(std::move(open)),
      close_(std::move(close)) {}

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
    const std::string& marker = in_reasoning_ ? close_ : open_;
    const size_t at = pending_.find(marker);
    if (at == std::string::npos) break;
    emit(out, std::string_view(pending_).substr(0, at));
    pending_.erase(0, at + marker.size());
    in_reasoning_ = !in_reasoning_;
    strip_newlines_ = true;
  }
  const size_t hold = partial_suffix(pending_, in_reasoning_ ? close_ : open_);
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

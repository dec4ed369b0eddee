// The stop-string matcher and the reasoning splitter, fed text in every possible split.
#include <gtest/gtest.h>

#include "server/text_filters.h"

using df::server::ReasoningSplitter;
using df::server::StopMatcher;

namespace {

// Feeds `text` in pieces cut at `cuts` and returns what was emitted, and whether it stopped.
std::pair<std::string, bool> run_stop(const std::vector<std::string>& stops, const std::string& text,
                                      size_t step) {
  StopMatcher m(stops);
  std::string out;
  for (size_t at = 0; at < text.size(); at += step) out += m.push(text.substr(at, step));
  if (!m.stopped()) out += m.flush();
  return {out, m.stopped()};
}

}  // namespace

TEST(StopMatcher, NeverEmitsTheStopStringInAnySplit) {
  for (size_t step = 1; step <= 12; ++step) {
    SCOPED_TRACE(step);
    auto [out, stopped] = run_stop({"<END>", "xyz"}, "hello <EN wait <END> more", step);
    EXPECT_TRUE(stopped);
    EXPECT_EQ(out, "hello <EN wait ");
    auto [out2, stopped2] = run_stop({"<END>"}, "no stop here <EN", step);
    EXPECT_FALSE(stopped2);
    EXPECT_EQ(out2, "no stop here <EN") << "a partial match that never completes is emitted at the end";
  }
}

TEST(StopMatcher, HoldsBackOnlyAPossibleStart) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("abcS"), "abc");
  EXPECT_EQ(m.push("T"), "");
  EXPECT_EQ(m.push("x"), "STx");
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.push("OP and more"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("later"), "");
}

TEST(StopMatcher, TheEarliestOfSeveralStopsWins) {
  auto [out, stopped] = run_stop({"bb", "a"}, "xxbbya", 100);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "xx");
}

TEST(ReasoningSplitter, SeparatesThinkBlocksInAnySplit) {
  const std::string text = "<think>\nsome thought</think>\n\nThe answer.";
  for (size_t step = 1; step <= 10; ++step) {
    SCOPED_TRACE(step);
    ReasoningSplitter s(true, false);
    std::string content, reasoning;
    for (size_t at = 0; at < text.size(); at += step) {
      auto t = s.push(text.substr(at, step));
      content += t.content;
      reasoning += t.reasoning;
    }
    auto t = s.flush();
    content += t.content;
    reasoning += t.reasoning;
    EXPECT_EQ(reasoning, "some thought");
    EXPECT_EQ(content, "The answer.");
  }
}

TEST(ReasoningSplitter, APromptThatOpenedTheBlockStartsInReasoning) {
  ReasoningSplitter s(true, true);
  auto a = s.push("thinking</think>answer");
  EXPECT_EQ(a.reasoning, "thinking");
  EXPECT_EQ(a.content, "answer");
}

TEST(ReasoningSplitter, FormatNoneKeepsEverythingInline) {
  ReasoningSplitter s(false, true);
  auto a = s.push("<think>x</think>y");
  EXPECT_EQ(a.content, "<think>x</think>y");
  EXPECT_TRUE(a.reasoning.empty());
}

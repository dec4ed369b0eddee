// The stop-string matcher and the reasoning splitter, fed text in every possible split.
#include <gtest/gtest.h>

#include "server/text_filters.h"

using df::server::ReasoningFormat;
using df::server::ReasoningSplitter;
using df::server::SplitText;
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

namespace {

SplitText run_split(ReasoningSplitter s, const std::string& text, size_t step) {
  SplitText all;
  for (size_t at = 0; at < text.size(); at += step) {
    auto t = s.push(text.substr(at, step));
    all.content += t.content;
    all.reasoning += t.reasoning;
  }
  auto t = s.flush();
  all.content += t.content;
  all.reasoning += t.reasoning;
  return all;
}

}  // namespace

// A Qwen3.5 reply: its generation prompt opened the block ("<|im_start|>assistant\n<think>\n"), so the reply
// is reasoning up to </think> and content after it, in any split of the stream; with thinking off the prompt
// closed an empty block and the reply is all content.
TEST(ReasoningSplitter, AQwen35ReplyIsReasoningUpToTheClosingMarker) {
  const std::string reply = "The user greets; answer briefly.</think>\n\nHello! How can I help?";
  for (size_t step = 1; step <= 40; ++step) {
    SCOPED_TRACE(step);
    const SplitText t = run_split(ReasoningSplitter(true, true), reply, step);
    EXPECT_EQ(t.reasoning, "The user greets; answer briefly.");
    EXPECT_EQ(t.content, "Hello! How can I help?");
    const SplitText off = run_split(ReasoningSplitter(true, false), "Hello! How can I help?", step);
    EXPECT_TRUE(off.reasoning.empty());
    EXPECT_EQ(off.content, "Hello! How can I help?");
  }
}

// Gemma 4's reply after "<|turn>model\n": the thought channel is reasoning (its header and the channel
// markers dropped), the rest content, in any split of the stream; with thinking off there is no channel, all
// content.
TEST(ReasoningSplitter, Gemma4ThoughtChannelSplitsInAnySplit) {
  const std::string text =
      "<|channel>thought\nThe user greets; answer briefly.<channel|>Hello! How can I help?";
  for (size_t step = 1; step <= 40; ++step) {
    SCOPED_TRACE(step);
    const SplitText t = run_split(ReasoningSplitter(true, false, ReasoningFormat::gemma4()), text, step);
    EXPECT_EQ(t.reasoning, "The user greets; answer briefly.");
    EXPECT_EQ(t.content, "Hello! How can I help?");
  }
  EXPECT_EQ(run_split(ReasoningSplitter(true, false, ReasoningFormat::gemma4()), "Hi there.", 3).content,
            "Hi there.");
  EXPECT_EQ(run_split(ReasoningSplitter(false, false, ReasoningFormat::gemma4()), text, 7).content, text);
}

// gpt-oss's reply after "<|start|>assistant": the analysis channel is reasoning, the final channel content,
// every harmony header and separator dropped, in any split of the stream.
TEST(ReasoningSplitter, HarmonyChannelsSplitInAnySplit) {
  const std::string text =
      "<|channel|>analysis<|message|>The user greets; answer briefly.<|end|><|start|>assistant"
      "<|channel|>final<|message|>Hello! How can I help?";
  for (size_t step = 1; step <= 40; ++step) {
    SCOPED_TRACE(step);
    const SplitText t = run_split(ReasoningSplitter(true, false, ReasoningFormat::harmony()), text, step);
    EXPECT_EQ(t.reasoning, "The user greets; answer briefly.");
    EXPECT_EQ(t.content, "Hello! How can I help?");
  }
  // Straight to the final channel, a commentary channel, and text with no header at all: content.
  EXPECT_EQ(run_split(ReasoningSplitter(true, false, ReasoningFormat::harmony()),
                      "<|channel|>final<|message|>Hi.", 3)
                .content,
            "Hi.");
  EXPECT_EQ(run_split(ReasoningSplitter(true, false, ReasoningFormat::harmony()),
                      "<|channel|>commentary<|message|>{\"a\":1}", 5)
                .content,
            "{\"a\":1}");
  const SplitText plain =
      run_split(ReasoningSplitter(true, false, ReasoningFormat::harmony()), "just <|text", 2);
  EXPECT_EQ(plain.content, "just <|text") << "a partial marker that never completes is content at the end";
  EXPECT_TRUE(plain.reasoning.empty());
  // Think markers mean nothing to the harmony format, and --reasoning-format none keeps the raw stream.
  EXPECT_EQ(
      run_split(ReasoningSplitter(true, false, ReasoningFormat::harmony()), "<think>x</think>", 1).content,
      "<think>x</think>");
  EXPECT_EQ(run_split(ReasoningSplitter(false, false, ReasoningFormat::harmony()), text, 7).content, text);
}

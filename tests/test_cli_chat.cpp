#include <gtest/gtest.h>

#include <sstream>

#include "cli_run.h"
#include "golden_json.h"

using df::testing::golden_json;
using df::testing::golden_path;
using df::testing::run_cli;
using df::testing::run_cli_split;

namespace {

// The lines of `text` that start with `head`, without it.
std::vector<std::string> lines_after(const std::string& text, const std::string& head) {
  std::vector<std::string> all;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find(head);
    if (at != std::string::npos) all.push_back(line.substr(at + head.size()));
  }
  return all;
}

// Every "prompt: N tokens: ids" line (--verbose-prompt), in order.
std::vector<std::vector<int32_t>> prompts_in(const std::string& err) {
  std::vector<std::vector<int32_t>> all;
  for (const std::string& rest : lines_after(err, "prompt: ")) {
    std::istringstream in(rest);
    size_t n = 0;
    std::string word;
    in >> n >> word;  // "N tokens:"
    if (word != "tokens:") continue;
    std::string listed;
    std::getline(in, listed);
    const std::vector<int32_t> ids = df::testing::parse_ids(listed);
    EXPECT_EQ(ids.size(), n);
    all.push_back(std::move(ids));
  }
  return all;
}

struct TurnStats {
  int evaluated, reused;
};
// Every "[prompt N new tokens (M reused) ..." line (--stats), in order.
std::vector<TurnStats> turn_stats(const std::string& err) {
  std::vector<TurnStats> all;
  for (const std::string& rest : lines_after(err, "[prompt ")) {
    std::istringstream in(rest);
    TurnStats t{};
    std::string w1, w2, reused;
    char paren = 0;
    if (in >> t.evaluated >> w1 >> w2 >> paren >> t.reused >> reused && w1 == "new" && paren == '(')
      all.push_back(t);
  }
  return all;
}

}  // namespace

// The REPL keeps the conversation across turns, obeys /reset and /exit, and works without a terminal.
TEST(CliChat, MultiTurnResetAndExit) {
  auto r =
      run_cli("chat -m " + golden_path("lfm2moe-tiny.gguf") +
              " -n 6 --temp 0 --stats <<'EOF'\nHello there\nAnd again\n/reset\nHi\n/exit\nnot read\nEOF");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("(conversation cleared)"), std::string::npos) << r.out;
  // Three replies, each with its stats line.
  size_t n = 0;
  for (size_t at = r.out.find("[prompt "); at != std::string::npos; at = r.out.find("[prompt ", at + 1)) ++n;
  EXPECT_EQ(n, 3u) << r.out;
  EXPECT_EQ(r.out.find("not read"), std::string::npos);
}

TEST(CliChat, MissingModelIsAnError) {
  auto r = run_cli("chat -m /nonexistent.gguf < /dev/null");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
}

// Turn 2's prompt holds turn 1 (the history) and the session evaluates only what is new: at least turn 1's
// prompt is reused. After /reset the next turn starts from an empty history and reuses nothing.
TEST(CliChat, TheSecondTurnReusesTheHistoryAndResetStartsOver) {
  auto r = run_cli_split("chat -m " + golden_path("lfm2moe-tiny.gguf") +
                         " -n 6 --temp 0 --stats --verbose-prompt <<'EOF'\nHello there\nAnd "
                         "again\n/reset\nHello there\n/exit\nEOF");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto prompts = prompts_in(r.err);
  const auto stats = turn_stats(r.err);
  ASSERT_EQ(prompts.size(), 3u) << r.err;
  ASSERT_EQ(stats.size(), 3u) << r.err;
  EXPECT_EQ(stats[0].reused, 0);
  EXPECT_EQ(stats[0].evaluated, static_cast<int>(prompts[0].size()));
  // The history: turn 2's prompt starts with turn 1's, and that much (at least) was not computed again.
  ASSERT_GT(prompts[1].size(), prompts[0].size());
  EXPECT_TRUE(std::equal(prompts[0].begin(), prompts[0].end(), prompts[1].begin()));
  EXPECT_GE(stats[1].reused, static_cast<int>(prompts[0].size())) << r.err;
  EXPECT_EQ(stats[1].reused + stats[1].evaluated, static_cast<int>(prompts[1].size()));
  // /reset: the same first message again renders the same prompt as turn 1, evaluated from scratch.
  EXPECT_EQ(prompts[2], prompts[0]);
  EXPECT_EQ(stats[2].reused, 0);
  EXPECT_EQ(stats[2].evaluated, static_cast<int>(prompts[2].size()));
}

// --system: the first turn's prompt is what llama.cpp renders for the system + user messages (golden chat
// case).
TEST(CliChat, SystemMessageIsRenderedAsLlamaCppRendersIt) {
  for (const char* model :
       {"lfm2moe-tiny", "qwen3moe-tiny", "gpt-oss-tiny", "hy_v3-tiny", "gemma4-tiny", "qwen35moe-tiny"}) {
    SCOPED_TRACE(model);
    const auto j = golden_json(model);
    for (const auto& c : j["chat"]["cases"]) {
      if (c["name"] != "system_user") continue;
      const std::string system = c["messages"][0]["content"], user = c["messages"][1]["content"];
      auto r = run_cli_split("chat -m " + golden_path(std::string(model) + ".gguf") + " --system '" + system +
                             "' -n 2 --temp 0 --verbose-prompt <<'EOF'\n" + user + "\n/exit\nEOF");
      ASSERT_EQ(r.status, 0) << r.err;
      const auto prompts = prompts_in(r.err);
      ASSERT_EQ(prompts.size(), 1u) << r.err;
      EXPECT_EQ(prompts[0], c["prompt_ids"].get<std::vector<int32_t>>());
    }
  }
}

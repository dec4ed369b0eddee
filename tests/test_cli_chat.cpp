#include <gtest/gtest.h>

#include "cli_run.h"
#include "golden_json.h"

using df::testing::golden_path;
using df::testing::run_cli;

// The REPL keeps the conversation across turns, obeys /reset and /exit, and works without a terminal.
TEST(CliChat, MultiTurnResetAndExit) {
  auto r = run_cli("chat -m " + golden_path("lfm2moe-tiny.gguf") +
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

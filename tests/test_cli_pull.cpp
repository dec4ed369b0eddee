// `diskformer pull`, `-hf`, `list` and `rm` as a user runs them, against the loopback hub
// (tests/scripts/hf_test_server.py): exit codes, messages, the progress lines of a non-terminal, Ctrl-C
// during a download, and -hf then run giving the same tokens as the GGUF itself.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "hub_test_server.h"
#include "test_store_util.h"

using namespace df::testing;

namespace {

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

const std::string kCommit = "c0ffee0000000000000000000000000000000003";
const std::string kRepo = "test-org/LFM2-tiny-GGUF";
const std::string kEntry = "test-org--LFM2-tiny-GGUF--LFM2-tiny-Q4_0";

struct CliRun {
  int code = -1;
  std::string out, err;
};

struct CliPull : ::testing::Test {
  std::string dir = scratch_dir();
  std::string xdg = dir + "/xdg";
  std::string cache = xdg + "/diskformer";
  HubTestServer server{dir};

  void serve(nlohmann::json faults = nlohmann::json::object()) {
    server.configure(
        {{"repos",
          {{kRepo, hub_repo(kCommit, {{"LFM2-tiny-Q4_0.gguf", golden("lfm2moe-tiny.gguf")},
                                      {"LFM2-tiny-F16.gguf", golden("lfm2moe-tiny-f16.gguf")},
                                      {"LFM2-tiny-imat-F16.gguf", golden("lfm2moe-tiny-f16.gguf")}})}}},
         {"faults", faults}});
  }
  // The environment of every run: the cache under the scratch directory, fast retries, no token or endpoint
  // from the user's shell.
  std::string env(const std::string& extra = "") {
    return fmt::format("env -u HF_TOKEN -u HF_ENDPOINT XDG_CACHE_HOME='{}' DISKFORMER_PULL_RETRY_MS=1 {} ",
                       xdg, extra);
  }
  CliRun run(const std::string& args, const std::string& extra_env = "") {
    const std::string out = dir + "/stdout.txt", err = dir + "/stderr.txt";
    const std::string cmd = env(extra_env) + fmt::format("'{}' {} > '{}' 2> '{}'", DF_BINARY, args, out, err);
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp_text(out);
    r.err = slurp_text(err);
    return r;
  }
  std::string hub() { return " --hf-endpoint " + server.endpoint(); }
};

const std::string kGenerate = " --prompt-ids 1,42,100,1000 -n 8 --temp 0 --ignore-eos --print-ids -t 2";

}  // namespace

TEST_F(CliPull, PullThenListThenRunTheStore) {
  serve();
  CliRun r = run("pull " + kRepo + ":Q4_0" + hub());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string store = cache + "/models/" + kEntry;
  EXPECT_HAS(r.out, "pulled " + kRepo + "/LFM2-tiny-Q4_0.gguf");
  EXPECT_HAS(r.out, "at commit " + kCommit);
  EXPECT_HAS(r.out, "store  " + store);
  // Not a terminal: one line per tenth of the download.
  EXPECT_HAS(r.err, "downloading:  50%");
  EXPECT_HAS(r.err, "downloading: 100%");
  EXPECT_FALSE(std::filesystem::exists(store + "/LFM2-tiny-Q4_0.gguf"));

  r = run("list");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_HAS(r.out, kEntry);
  EXPECT_HAS(r.out, "ready");
  EXPECT_HAS(r.out, kCommit.substr(0, 12));
  EXPECT_HAS(r.out, "never");
  EXPECT_HAS(r.out, kRepo + "/LFM2-tiny-Q4_0.gguf");

  const CliRun from_store = run("run -m " + store + kGenerate);
  const CliRun from_gguf = run("run -m " + golden("lfm2moe-tiny.gguf") + kGenerate);
  ASSERT_EQ(from_store.code, 0) << from_store.err;
  ASSERT_EQ(from_gguf.code, 0) << from_gguf.err;
  EXPECT_EQ(from_store.out, from_gguf.out);

  r = run("pull " + kRepo + ":Q4_0" + hub());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_HAS(r.out, "already pulled");

  r = run("rm " + kEntry);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_HAS(r.out, "removed " + kEntry);
  // What is left is the store that `run -m FILE.gguf` made.
  r = run("list");
  EXPECT_EQ(r.out.find(kEntry), std::string::npos) << r.out;
  EXPECT_HAS(r.out, "ingested from lfm2moe-tiny.gguf");
  r = run("rm " + kEntry);
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "no model '" + kEntry + "'");
  const std::string ingested = r.err.substr(r.err.find("\n  ") + 3, 16);
  EXPECT_EQ(run("rm " + ingested).code, 0);
  EXPECT_HAS(run("list").out, "no models in");
}

TEST_F(CliPull, HfThenRunGivesTheGgufsTokensAndWorksOfflineAfterwards) {
  serve({{"redirect", true}, {"drop_at", {777777}}});
  const CliRun want = run("run -m " + golden("lfm2moe-tiny.gguf") + kGenerate);
  ASSERT_EQ(want.code, 0) << want.err;
  CliRun r = run("run -hf " + kRepo + ":Q4_0" + hub() + kGenerate);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, want.out);
  EXPECT_EQ(server.requests_to("/_blob/").back()["range"], "bytes=777777-");
  server.configure({{"repos", nlohmann::json::object()}});
  r = run("run -hf " + kRepo + ":Q4_0" + hub() + kGenerate);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, want.out);
  EXPECT_EQ(run("list").out.find("never"), std::string::npos);  // the run was recorded
  r = run("bench -hf " + kRepo + ":Q4_0 -p 8 -n 4 -t 2 --json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_HAS(r.out, kRepo + ":Q4_0");
}

TEST_F(CliPull, BadNamesAndAnswersExitNonZeroWithTheReason) {
  serve({{"require_token", "hf_good"}});
  CliRun r = run("pull " + kRepo + ":Q4_0" + hub());
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "needs a token: set HF_TOKEN");
  r = run("pull " + kRepo + ":Q4_0" + hub(), "HF_TOKEN=hf_bad");
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "refused HF_TOKEN");
  r = run("pull " + kRepo + ":F16" + hub(), "HF_TOKEN=hf_good");
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "2 GGUF files match the quant tag 'F16'");
  EXPECT_HAS(r.err, "LFM2-tiny-imat-F16.gguf");
  r = run("pull test-org/nothing:Q4_0" + hub(), "HF_TOKEN=hf_good");
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "no such model or revision");
  r = run("pull " + kRepo + "/missing.gguf" + hub(), "HF_TOKEN=hf_good");
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "has no file 'missing.gguf'");
  r = run("pull '../etc:Q4_0'" + hub());
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "not a Hugging Face repository name");
  r = run("run -hf " + kRepo + ":Q4_0 -m x.gguf -p hi");
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "name the model once");
  r = run("pull " + kRepo + ":Q4_0 --hf-endpoint ftp://x");
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "not an http:// or https:// URL");
  EXPECT_TRUE(server.requests_to("/resolve/").empty());
}

TEST_F(CliPull, CtrlCKeepsThePartAndTheNextPullResumesIt) {
  serve({{"slow_bps", 1000000}});
  const std::string out = dir + "/sigint-stdout.txt", err = dir + "/sigint-stderr.txt";
  const std::string part = cache + "/models/" + kEntry + "/LFM2-tiny-Q4_0.gguf.part";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("XDG_CACHE_HOME", xdg.c_str(), 1);
    ::unsetenv("HF_TOKEN");
    ::unsetenv("HF_ENDPOINT");
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, STDOUT_FILENO);
    ::dup2(e, STDERR_FILENO);
    const std::string endpoint = server.endpoint();
    ::execl(DF_BINARY, DF_BINARY, "pull", (kRepo + ":Q4_0").c_str(), "--hf-endpoint", endpoint.c_str(),
            static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ASSERT_GT(pid, 0);
  std::error_code ec;
  auto part_bytes = [&] {
    const uint64_t n = std::filesystem::file_size(part, ec);
    return ec ? 0 : n;
  };
  for (int i = 0; i < 1000 && part_bytes() < 300000; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const std::string said = slurp_text(err);
  EXPECT_HAS(said, "interrupted:");
  EXPECT_HAS(said, part);
  const uint64_t kept = std::filesystem::file_size(part);
  EXPECT_GE(kept, 300000u);
  EXPECT_LT(kept, std::filesystem::file_size(golden("lfm2moe-tiny.gguf")));
  EXPECT_HAS(run("list").out, "downloaded ");

  serve();
  server.clear_log();
  const CliRun r = run("pull " + kRepo + ":Q4_0" + hub());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_HAS(r.err, "resuming");
  EXPECT_EQ(server.requests_to("/resolve/").at(0)["range"], "bytes=" + std::to_string(kept) + "-");
  EXPECT_FALSE(std::filesystem::exists(part));
}

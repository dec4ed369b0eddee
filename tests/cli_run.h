#pragma once
// Runs the diskformer binary (DF_BINARY) through the shell and captures its output and exit status.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace df::testing {

struct CliResult {
  int status = -1;
  std::string out;
};

// Stores made on first use of a .gguf go under the build tree, not the user's cache.
inline std::string env() { return std::string("XDG_CACHE_HOME=") + DF_TEST_TMP + "/xdg-cache "; }

// `stderr_to`: "&1" to capture stderr with stdout, "/dev/null" to drop it.
inline CliResult run_shell(const std::string& args, const char* stderr_to) {
  CliResult r;
  std::string cmd = env() + std::string(DF_BINARY) + " 2>" + stderr_to + " " + args;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// stdout and stderr apart (stderr through a file beside the test's scratch files).
struct CliSplitResult {
  int status = -1;
  std::string out, err;
};
inline CliSplitResult run_cli_split(const std::string& args) {
  const std::string err_path = std::string(DF_TEST_TMP) + "/stderr-" + std::to_string(::getpid()) + ".txt";
  std::filesystem::create_directories(DF_TEST_TMP);
  CliResult r = run_shell(args, err_path.c_str());
  CliSplitResult s{r.status, std::move(r.out), {}};
  if (FILE* f = std::fopen(err_path.c_str(), "rb")) {
    std::array<char, 4096> buf{};
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) s.err.append(buf.data(), n);
    std::fclose(f);
  }
  std::remove(err_path.c_str());
  return s;
}

// Token ids as the CLI takes them ("1,2,3" with sep ",") and prints them (space-separated).
inline std::string join(const std::vector<int32_t>& ids, const char* sep) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s.append(sep);
    s.append(std::to_string(ids[i]));
  }
  return s;
}

inline std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  int32_t v;
  while (in >> v) ids.push_back(v);
  return ids;
}

// stdout and stderr together.
inline CliResult run_cli(const std::string& args) { return run_shell(args, "&1"); }
// stdout only.
inline CliResult run_cli_stdout(const std::string& args) { return run_shell(args, "/dev/null"); }

}  // namespace df::testing

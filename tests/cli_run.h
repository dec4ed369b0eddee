#pragma once
// Runs the diskformer binary (DF_BINARY) through the shell and captures its output and exit status.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace df::testing {

struct CliResult {
  int status = -1;
  std::string out;  // stdout and stderr together (2>&1) unless the command redirects
};

// Stores made on first use of a .gguf go under the build tree, not the user's cache.
inline std::string env() { return std::string("XDG_CACHE_HOME=") + DF_TEST_TMP + "/xdg-cache "; }

inline CliResult run_cli(const std::string& args) {
  CliResult r;
  std::string cmd = env() + std::string(DF_BINARY) + " 2>&1 " + args;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Runs with stdout only (stderr discarded).
inline CliResult run_cli_stdout(const std::string& args) {
  CliResult r;
  std::string cmd = env() + std::string(DF_BINARY) + " 2>/dev/null " + args;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace df::testing

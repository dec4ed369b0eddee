#include "child_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common.h"
#include "llama_util.h"

namespace golden_maker {

std::string self_exe() { return fs::read_symlink("/proc/self/exe").string(); }

void run_child(std::vector<std::string> args, const std::string& log_path) {
  if (g_log_level == GGML_LOG_LEVEL_DEBUG) {
    args.push_back("--verbose");  // the child's full llama.cpp log then lands in log_path
  }
  fprintf(stderr, "golden_maker:");
  for (size_t i = 1; i < args.size(); i++) {
    fprintf(stderr, " %s", args[i].c_str());
  }
  fprintf(stderr, "\n");
  fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    fail("fork failed: %s", strerror(errno));
  }
  if (pid == 0) {
    FILE* lf = fopen(log_path.c_str(), "w");
    if (lf) {
      dup2(fileno(lf), 2);
    }
    std::vector<char*> argv;
    for (const auto& a : args) {
      argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) < 0) {
    fail("waitpid failed");
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::string tail = read_file(log_path);
    if (tail.size() > 3000) {
      tail = tail.substr(tail.size() - 3000);
    }
    fail("child failed (status %d): %s\n--- %s (tail) ---\n%s", st, args[1].c_str(), log_path.c_str(),
         tail.c_str());
  }
}

}  // namespace golden_maker

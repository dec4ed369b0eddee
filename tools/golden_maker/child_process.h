// `make` runs every CPU path in a child process of this same binary.
#pragma once

#include <string>
#include <vector>

namespace golden_maker {

std::string self_exe();

// Runs args (args[0] = the binary) with its stderr in log_path; fails with the log's tail when the child
// fails.
void run_child(std::vector<std::string> args, const std::string& log_path);

}  // namespace golden_maker

#pragma once
// One exception type for every user-facing failure: the message is what the user reads, so it names the
// file, field, offset or flag at fault and, where there is one, the fix.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace df {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The user stopped the work (Ctrl-C) and it was left in a state the next run resumes from; the message says
// what was kept. main() exits with 130, the shell's status for SIGINT.
class Interrupted : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace df

#pragma once
// Access to the golden fixtures: ../shared/golden (README there), else the project's own for architectures
// that folder lacks (tests/golden, copied beside the models make-model writes at build time; see
// tests/CMakeLists.txt).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace df::testing {

// The path of a fixture file (e.g. "hy_v3-tiny.gguf"): the shared folder's when it has it, else the own
// one's. DF_GOLDEN_OVERRIDE (environment), when set, is a folder searched first: a fixture made for another
// seed or shape then runs through the same tests under a known name (tools/golden_maker/try_variants.sh).
inline std::string golden_path(const std::string& name) {
  if (const char* dir = std::getenv("DF_GOLDEN_OVERRIDE"); dir && *dir) {
    const std::string over = std::string(dir) + "/" + name;
    if (std::filesystem::exists(over)) return over;
  }
  const std::string shared = std::string(DF_GOLDEN_DIR) + "/" + name;
  if (std::filesystem::exists(shared)) return shared;
  return std::string(DF_OWN_GOLDEN_DIR) + "/" + name;
}

inline nlohmann::json golden_json(const std::string& model) {
  std::ifstream f(golden_path(model + ".json"));
  return nlohmann::json::parse(f);
}

}  // namespace df::testing

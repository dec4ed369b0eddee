#pragma once
// Access to the golden fixtures (../shared/golden, README there).
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace df::testing {

inline std::string golden_path(const std::string& name) { return std::string(DF_GOLDEN_DIR) + "/" + name; }

inline nlohmann::json golden_json(const std::string& model) {
  std::ifstream f(golden_path(model + ".json"));
  return nlohmann::json::parse(f);
}

}  // namespace df::testing

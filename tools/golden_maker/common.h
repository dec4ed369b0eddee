// Errors, whole files and SHA-256: what every part of golden_maker reads and writes with.
#pragma once

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

// All of golden_maker lives in this namespace (it was one file's anonymous namespace before): a name of ours
// in the global namespace (read_file, tokenize, fail, ...) could otherwise interpose a symbol of the same
// name that the prebuilt libllama-common exports.
namespace golden_maker {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

[[noreturn]] void fail(const char* fmt, ...);

std::string read_file(const std::string& path);
void write_file(const std::string& path, const void* data, size_t n);
template <typename T>
void write_vec(const std::string& path, const std::vector<T>& v) {
  write_file(path, v.data(), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> read_vec(const std::string& path, size_t expect_count) {
  const std::string s = read_file(path);
  if (s.size() != expect_count * sizeof(T)) {
    fail("%s: %zu bytes, expected %zu", path.c_str(), s.size(), expect_count * sizeof(T));
  }
  std::vector<T> v(expect_count);
  memcpy(v.data(), s.data(), s.size());
  return v;
}
json read_json(const std::string& path);

// SHA-256 (FIPS 180-4), for the hashes the JSON carries
std::string sha256_hex(const void* data, size_t len);
std::string sha256_file(const std::string& path);

}  // namespace golden_maker

#include "hub/names.h"

#include <algorithm>
#include <cctype>

#include "util/error.h"

namespace df::hub {

namespace {

bool is_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool is_hex_lower(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool is_repo_part(std::string_view p) {
  if (p.empty() || p.size() > 96 || !is_alnum(p.front())) return false;
  if (p.find("--") != std::string_view::npos || p.find("..") != std::string_view::npos) return false;
  return std::all_of(p.begin(), p.end(),
                     [](char c) { return is_alnum(c) || c == '.' || c == '_' || c == '-'; });
}

}  // namespace

std::string to_lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

void check_repo_name(std::string_view repo) {
  const size_t slash = repo.find('/');
  const bool ok = slash != std::string_view::npos && is_repo_part(repo.substr(0, slash)) &&
                  is_repo_part(repo.substr(slash + 1));
  if (!ok)
    fail(
        "'{}' is not a Hugging Face repository name: expected ORG/NAME, each part letters, digits, '.', '_' "
        "or '-' (starting with a letter or digit, no '--' or '..')",
        repo);
}

bool is_safe_repo_file(std::string_view file) {
  if (file.empty() || file.size() > 1024) return false;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(file.find('/', start), file.size());
    const std::string_view part = file.substr(start, end - start);
    if (part.empty() || part.size() > 255 || part == "." || part == "..") return false;
    for (char c : part)
      if (!is_alnum(c) && c != '.' && c != '_' && c != '-' && c != '+') return false;
    if (end == file.size()) return true;
    start = end + 1;
  }
}

void check_repo_file(std::string_view file) {
  if (!is_safe_repo_file(file))
    fail(
        "'{}' is not a file name diskformer accepts: expected '/'-separated parts of letters, digits, '.', "
        "'_', '+' or '-', none empty, '.' or '..'",
        file);
}

void check_revision(std::string_view revision) {
  const bool ok = !revision.empty() && revision.size() <= 255 && revision.front() != '/' &&
                  revision.front() != '-' && revision.find("..") == std::string_view::npos &&
                  std::all_of(revision.begin(), revision.end(), [](char c) {
                    return is_alnum(c) || c == '.' || c == '_' || c == '-' || c == '/';
                  });
  if (!ok)
    fail("'{}' is not a revision: expected a branch, tag or commit id (letters, digits, '.', '_', '-', '/')",
         revision);
}

bool is_commit_id(std::string_view s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), is_hex_lower);
}

bool is_sha256_hex(std::string_view s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return is_hex_lower(c) || (c >= 'A' && c <= 'F'); });
}

}  // namespace df::hub

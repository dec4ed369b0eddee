#pragma once
// What a Hugging Face name may look like before it goes into a URL or a path on this machine. Every name
// comes from outside (the command line, the hub's JSON), so each is checked against a narrow pattern rather
// than cleaned: a name that does not fit is refused with the reason.
#include <string>
#include <string_view>

namespace df::hub {

// "org/name": two parts of [A-Za-z0-9._-], each starting with a letter or digit, at most 96 characters,
// without "--" or ".." (the hub's own rules; "--" also keeps the local directory names unambiguous).
void check_repo_name(std::string_view repo);
// A file of a repository as the hub lists it: '/'-separated parts of [A-Za-z0-9._+-], none empty, "." or
// "..", at most 255 characters per part and 1024 in all: never absolute, never leaving the directory.
bool is_safe_repo_file(std::string_view file);
void check_repo_file(std::string_view file);
// A branch, tag or commit: [A-Za-z0-9._/-], at most 255 characters, no "..", not starting with '/' or '-'.
void check_revision(std::string_view revision);
// 40 lowercase hex digits (a git commit id).
bool is_commit_id(std::string_view s);
// 64 hex digits (a sha256); lowercased by the caller before comparing.
bool is_sha256_hex(std::string_view s);
std::string to_lower(std::string_view s);

}  // namespace df::hub

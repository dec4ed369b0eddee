#include "hub/hf_listing.h"

#include <nlohmann/json.hpp>
#include <set>

#include "hub/names.h"
#include "util/error.h"

namespace df::hub {

namespace {

using Json = nlohmann::json;

uint64_t size_field(const Json& j, const char* key, const std::string& where, const std::string& file) {
  const Json& v = j.at(key);
  if (!v.is_number_unsigned() || v.get<uint64_t>() > kMaxFileBytes)
    fail("{}: \"{}\" of '{}' is not a file size ({})", where, key, file, v.dump());
  return v.get<uint64_t>();
}

// LFS files carry their sha256 as "sha256", or git-lfs style as "oid": "sha256:<hex>" on some servers.
std::string lfs_sha256(const Json& lfs, const std::string& where, const std::string& file) {
  std::string sha;
  if (lfs.contains("sha256") && lfs["sha256"].is_string()) {
    sha = lfs["sha256"].get<std::string>();
  } else if (lfs.contains("oid") && lfs["oid"].is_string()) {
    sha = lfs["oid"].get<std::string>();
    if (sha.starts_with("sha256:")) sha = sha.substr(7);
  }
  if (!is_sha256_hex(sha)) fail("{}: the LFS sha256 of '{}' is missing or not 64 hex digits", where, file);
  return to_lower(sha);
}

RepoFile parse_sibling(const Json& s, const std::string& where) {
  if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string())
    fail("{}: a sibling without a \"rfilename\" string", where);
  RepoFile f;
  f.path = s["rfilename"].get<std::string>();
  if (!is_safe_repo_file(f.path))
    fail("{}: refusing a listing that names the unsafe file '{}'", where, f.path.substr(0, 300));
  if (s.contains("size") && !s["size"].is_null()) f.size = size_field(s, "size", where, f.path);
  if (s.contains("lfs") && !s["lfs"].is_null()) {
    const Json& lfs = s["lfs"];
    if (!lfs.is_object()) fail("{}: \"lfs\" of '{}' is not an object", where, f.path);
    f.sha256 = lfs_sha256(lfs, where, f.path);
    if (!lfs.contains("size")) fail("{}: the LFS entry of '{}' has no size", where, f.path);
    const uint64_t lfs_size = size_field(lfs, "size", where, f.path);
    if (f.size != 0 && f.size != lfs_size)
      fail("{}: '{}' is listed with {} bytes and an LFS object of {} bytes", where, f.path, f.size, lfs_size);
    f.size = lfs_size;
  }
  return f;
}

}  // namespace

const RepoFile* RepoListing::find(std::string_view path) const {
  for (const RepoFile& f : files)
    if (f.path == path) return &f;
  return nullptr;
}

RepoListing parse_listing(std::string_view json_text, std::string_view revision, const std::string& where) {
  if (json_text.size() > kMaxListingBytes)
    fail("{}: the answer is {} bytes, more than a listing can be", where, json_text.size());
  Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) fail("{}: the answer is not JSON", where);
  if (!root.is_object()) fail("{}: the answer is not a JSON object", where);
  RepoListing listing;
  if (root.contains("sha") && !root["sha"].is_null()) {
    if (!root["sha"].is_string() || !is_commit_id(root["sha"].get<std::string>()))
      fail("{}: \"sha\" is not a commit id", where);
    listing.commit = root["sha"].get<std::string>();
    if (is_commit_id(revision) && listing.commit != revision)
      fail("{}: asked for commit {}, the answer is of commit {}", where, revision, listing.commit);
  } else if (is_commit_id(revision)) {
    listing.commit = std::string(revision);
  } else {
    fail("{}: the answer does not say which commit '{}' is (no \"sha\")", where, revision);
  }
  if (!root.contains("siblings") || !root["siblings"].is_array())
    fail("{}: no \"siblings\" list of files", where);
  const Json& siblings = root["siblings"];
  if (siblings.size() > kMaxListingFiles)
    fail("{}: {} files, more than diskformer reads from one listing", where, siblings.size());
  std::set<std::string> seen;
  for (const Json& s : siblings) {
    RepoFile f = parse_sibling(s, where);
    if (!seen.insert(f.path).second) fail("{}: '{}' is listed twice", where, f.path);
    listing.files.push_back(std::move(f));
  }
  return listing;
}

}  // namespace df::hub

#pragma once
// A repository's files at one commit, from the hub's `GET /api/models/REPO/revision/REV?blobs=true`:
//   {"sha": "<commit>", "siblings": [{"rfilename": "a.gguf", "size": 123,
//                                     "lfs": {"sha256": "<hex>", "size": 123, "pointerSize": 134}}, ...]}
// The JSON comes from the network, so every field is checked (types, sizes, names) before it is used.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace df::hub {

constexpr uint64_t kMaxFileBytes = 1ull << 48;  // 256 TiB: no model file is larger
constexpr size_t kMaxListingBytes = 32u << 20;  // a listing answer larger than this is refused
constexpr size_t kMaxListingFiles = 100000;

struct RepoFile {
  std::string path;    // as the repository names it (names.h: is_safe_repo_file)
  uint64_t size = 0;   // 0 when the hub does not say
  std::string sha256;  // lowercase hex; empty for a file that is not stored in LFS
};

struct RepoListing {
  std::string commit;  // 40 hex digits
  std::vector<RepoFile> files;
  const RepoFile* find(std::string_view path) const;
};

// `where` names the answer in messages ("the hub's listing of ORG/NAME at main"); `revision` is what was
// asked for: when it is a commit id, the answer must be of that commit.
RepoListing parse_listing(std::string_view json_text, std::string_view revision, const std::string& where);

}  // namespace df::hub

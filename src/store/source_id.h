#pragma once
// Who a source GGUF is: name, size and sha256. Hashing a 13.5 GB file takes a while, so the hash is
// remembered in a small index (CACHE_ROOT/index.json) keyed by the file's absolute path and its stat stamp
// (size, mtime, ctime, inode, device): any change to the file, even one that keeps size and mtime, changes
// ctime and forces a new hash.
#include <cstdint>
#include <optional>
#include <string>

#include "store/store.h"

namespace df::store {

// $XDG_CACHE_HOME/diskformer when XDG_CACHE_HOME is an absolute path, else $HOME/.cache/diskformer.
std::string default_cache_root();

// sha256 (lowercase hex) of a whole file, read sequentially in 8 MiB chunks; the next chunk is read while the
// current one is hashed. progress("hashing source", done, total).
std::string sha256_file(const std::string& path, const ProgressFn& progress = {});

struct FileStamp {
  uint64_t size = 0, mtime_ns = 0, ctime_ns = 0, ino = 0, dev = 0;
  bool operator==(const FileStamp&) const = default;
};
FileStamp stamp_of(const std::string& path);  // throws df::Error when the file cannot be stat'ed

// The remembered sha256 of `path` if its stamp is unchanged since it was hashed.
std::optional<std::string> index_lookup(const std::string& cache_root, const std::string& path);
// Best effort: a cache that cannot be written costs a re-hash later, never a failure.
void index_remember(const std::string& cache_root, const std::string& path, const std::string& sha256);

}  // namespace df::store

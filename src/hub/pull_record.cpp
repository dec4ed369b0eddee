#include "hub/pull_record.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hub/names.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace df::hub {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr const char* kRecordFormat = "diskformer-pull";
constexpr int kRecordVersion = 1;
constexpr uint64_t kMaxRecordBytes = 1u << 20;

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

template <typename T>
T field(const Json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) fail("{}: \"{}\" is missing", path, key);
  try {
    return j[key].get<T>();
  } catch (const Json::exception&) {
    fail("{}: \"{}\" has the wrong type ({})", path, key, j[key].dump());
  }
}

}  // namespace

std::string models_dir(const std::string& cache_root) { return (fs::path(cache_root) / "models").string(); }

std::string entry_name(const std::string& repo, const std::string& file) {
  std::string f = file;
  if (to_lower(f).ends_with(".gguf")) f.resize(f.size() - 5);
  return replace_all(repo, "/", "--") + "--" + replace_all(f, "/", "--");
}

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<PullRecord> read_record(const std::string& dir) {
  const std::string path = (fs::path(dir) / kRecordFile).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.size() > kMaxRecordBytes) fail("{}: {} bytes, too large for a pull record", path, text.size());
  const Json j = Json::parse(text, nullptr, false);
  if (!j.is_object()) fail("{}: not a JSON object", path);
  if (j.value("format", "") != kRecordFormat || j.value("version", 0) != kRecordVersion)
    fail("{}: not a diskformer pull record of version {}", path, kRecordVersion);
  PullRecord r;
  r.repo = field<std::string>(j, "repo", path);
  r.file = field<std::string>(j, "file", path);
  r.revision = field<std::string>(j, "revision", path);
  r.commit = field<std::string>(j, "commit", path);
  r.sha256 = field<std::string>(j, "sha256", path);
  r.size = field<uint64_t>(j, "size", path);
  r.endpoint = field<std::string>(j, "endpoint", path);
  r.pulled_at = field<int64_t>(j, "pulled_at", path);
  r.last_used = field<int64_t>(j, "last_used", path);
  r.complete = field<bool>(j, "complete", path);
  r.gguf_kept = field<bool>(j, "gguf_kept", path);
  // The names become paths and URLs again: the same rules as when they came from the hub.
  check_repo_name(r.repo);
  check_repo_file(r.file);
  if (!is_sha256_hex(r.sha256)) fail("{}: \"sha256\" is not 64 hex digits", path);
  return r;
}

void write_record(const std::string& dir, const PullRecord& r) {
  Json j;
  j["format"] = kRecordFormat;
  j["version"] = kRecordVersion;
  j["repo"] = r.repo;
  j["file"] = r.file;
  j["revision"] = r.revision;
  j["commit"] = r.commit;
  j["sha256"] = r.sha256;
  j["size"] = r.size;
  j["endpoint"] = r.endpoint;
  j["pulled_at"] = r.pulled_at;
  j["last_used"] = r.last_used;
  j["complete"] = r.complete;
  j["gguf_kept"] = r.gguf_kept;
  const std::string text = j.dump(2) + "\n";
  AtomicFile f((fs::path(dir) / kRecordFile).string());
  f.write(text.data(), text.size());
  f.commit();
}

EntryLock::EntryLock(const std::string& dir, bool wait) {
  const std::string path = (fs::path(dir) / kLockFile).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  if (errno != EWOULDBLOCK) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    fail("cannot lock '{}': {}", path, std::strerror(e));
  }
  if (!wait) {
    ::close(fd_);
    fd_ = -1;
    fail("another diskformer process is pulling or removing {} right now; wait for it to finish", dir);
  }
  while (::flock(fd_, LOCK_EX) != 0)
    if (errno != EINTR) fail("cannot lock '{}': {}", path, std::strerror(errno));
}

EntryLock::~EntryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace df::hub

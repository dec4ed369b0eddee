#include "store/source_id.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <vector>

#include "store/manifest.h"
#include "store/record_io.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace df::store {

namespace {

namespace fs = std::filesystem;

constexpr size_t kHashChunk = 8u << 20;
constexpr const char* kIndexFile = "index.json";
constexpr const char* kIndexFormat = "diskformer-sha256-index";

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  auto p = fs::canonical(path, ec);
  return ec ? fs::absolute(path).lexically_normal().string() : p.string();
}

Json stamp_to_json(const FileStamp& s) {
  return Json{
      {"size", s.size}, {"mtime_ns", s.mtime_ns}, {"ctime_ns", s.ctime_ns}, {"ino", s.ino}, {"dev", s.dev}};
}

Json read_index(const std::string& root) {
  std::ifstream in(fs::path(root) / kIndexFile);
  if (!in) return Json::object();
  try {
    Json j = Json::parse(in);
    if (j.is_object() && j.value("format", "") == kIndexFormat && j.contains("entries") &&
        j["entries"].is_object())
      return j["entries"];
  } catch (const std::exception&) {
    // A damaged index is only a lost cache: start a new one.
  }
  return Json::object();
}

struct EvpCtx {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~EvpCtx() { EVP_MD_CTX_free(ctx); }
};

}  // namespace

std::string default_cache_root() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return (fs::path(xdg) / "diskformer").string();
  const char* home = std::getenv("HOME");
  if (!home || home[0] == '\0')
    fail(
        "cannot find a cache directory: neither XDG_CACHE_HOME nor HOME is set; pass the store directory "
        "explicitly (--store DIR or -o DIR)");
  return (fs::path(home) / ".cache" / "diskformer").string();
}

FileStamp stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("cannot stat '{}': {}", path, std::strerror(errno));
  FileStamp s;
  s.size = static_cast<uint64_t>(st.st_size);
  s.mtime_ns =
      static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_mtim.tv_nsec);
  s.ctime_ns =
      static_cast<uint64_t>(st.st_ctim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_ctim.tv_nsec);
  s.ino = static_cast<uint64_t>(st.st_ino);
  s.dev = static_cast<uint64_t>(st.st_dev);
  return s;
}

std::string sha256_file(const std::string& path, const ProgressFn& progress) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  struct FdGuard {
    int fd;
    ~FdGuard() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("cannot stat '{}': {}", path, std::strerror(errno));
  const auto size = static_cast<uint64_t>(st.st_size);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

  EvpCtx h;
  if (!h.ctx || EVP_DigestInit_ex(h.ctx, EVP_sha256(), nullptr) != 1)
    fail("OpenSSL: cannot start a sha256 digest");
  std::vector<uint8_t> bufs[2] = {std::vector<uint8_t>(kHashChunk), std::vector<uint8_t>(kHashChunk)};
  auto read_chunk = [&](uint64_t offset, int which) -> size_t {
    size_t n = static_cast<size_t>(std::min<uint64_t>(kHashChunk, size - offset));
    if (n > 0)
      pread_exact(fd, path, offset, n, bufs[which].data(), fmt::format("bytes [{}, {})", offset, offset + n));
    return n;
  };
  uint64_t done = 0;
  int cur = 0;
  std::future<size_t> pending = std::async(std::launch::async, read_chunk, uint64_t{0}, cur);
  while (true) {
    size_t n = pending.get();
    if (n == 0) break;
    uint64_t next = done + n;
    pending = std::async(std::launch::async, read_chunk, next, 1 - cur);
    if (EVP_DigestUpdate(h.ctx, bufs[cur].data(), n) != 1) fail("OpenSSL: sha256 update failed");
    done = next;
    cur = 1 - cur;
    if (progress) progress("hashing source", done, size);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  if (EVP_DigestFinal_ex(h.ctx, md, &md_len) != 1) fail("OpenSSL: sha256 final failed");
  struct stat after {};
  if (::fstat(fd, &after) != 0 || static_cast<uint64_t>(after.st_size) != size)
    fail("'{}' changed size while it was being hashed", path);
  std::string hex;
  for (unsigned i = 0; i < md_len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

std::optional<std::string> index_lookup(const std::string& cache_root, const std::string& path) {
  Json entries = read_index(cache_root);
  auto it = entries.find(absolute_path(path));
  if (it == entries.end() || !it->is_object()) return std::nullopt;
  try {
    if ((*it)["stamp"] != stamp_to_json(stamp_of(path))) return std::nullopt;
    std::string sha = (*it)["sha256"].get<std::string>();
    if (sha.size() != 64 || sha.find_first_not_of("0123456789abcdef") != std::string::npos)
      return std::nullopt;
    return sha;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void index_remember(const std::string& cache_root, const std::string& path, const std::string& sha256) {
  try {
    fs::create_directories(cache_root);
    Json entries = read_index(cache_root);
    // Forget files that are gone, so the index does not grow without bound.
    for (auto it = entries.begin(); it != entries.end();) {
      std::error_code ec;
      if (!fs::exists(it.key(), ec))
        it = entries.erase(it);
      else
        ++it;
    }
    entries[absolute_path(path)] = Json{{"stamp", stamp_to_json(stamp_of(path))}, {"sha256", sha256}};
    Json j{{"format", kIndexFormat}, {"entries", entries}};
    AtomicFile out((fs::path(cache_root) / kIndexFile).string());
    std::string text = j.dump(1) + "\n";
    out.write(text.data(), text.size());
    out.commit();
  } catch (const std::exception&) {
    // Best effort by design (see the header).
  }
}

}  // namespace df::store

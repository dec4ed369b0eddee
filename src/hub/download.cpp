#include "hub/download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <vector>

#include "hub/sha256.h"
#include "store/progress.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace df::hub {

namespace {

constexpr size_t kHashChunk = 8u << 20;

// The .part file: opened once, written at explicit offsets.
class PartFile {
 public:
  explicit PartFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open '{}': {}", path_, std::strerror(errno));
  }
  ~PartFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  PartFile(const PartFile&) = delete;
  PartFile& operator=(const PartFile&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  uint64_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot stat '{}': {}", path_, std::strerror(errno));
    return static_cast<uint64_t>(st.st_size);
  }
  void empty() {
    if (::ftruncate(fd_, 0) != 0) fail("cannot truncate '{}': {}", path_, std::strerror(errno));
  }
  // false with `error` set when the disk refuses (full, I/O error): the bytes before stay valid.
  bool write_at(uint64_t offset, const char* data, size_t n, std::string& error) {
    while (n > 0) {
      const ssize_t w = ::pwrite(fd_, data, n, static_cast<off_t>(offset));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        error = fmt::format("cannot write '{}': {}", path_, w < 0 ? std::strerror(errno) : "no progress");
        return false;
      }
      data += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
    return true;
  }
  void sync() {
    if (::fsync(fd_) != 0) fail("cannot fsync '{}': {}", path_, std::strerror(errno));
  }
  void close_and_remove() {
    ::close(fd_);
    fd_ = -1;
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT)
      fail("cannot remove '{}': {}", path_, std::strerror(errno));
  }
  void close() {
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail("cannot close '{}': {}", path_, std::strerror(errno));
    }
    fd_ = -1;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

bool cancelled(const DownloadOptions& o) { return o.cancel && o.cancel->load(); }

void note(const DownloadOptions& o, const std::string& s) {
  if (o.on_message) o.on_message(s);
}

// The bytes a .part already holds feed the hash before the download continues after them.
void hash_prefix(PartFile& part, uint64_t n, Sha256& sha, const DownloadOptions& o) {
  std::vector<char> buf(kHashChunk);
  for (uint64_t done = 0; done < n;) {
    if (cancelled(o)) throw Interrupted(fmt::format("interrupted; {} is kept for the next run", part.path()));
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kHashChunk, n - done));
    const ssize_t r = ::pread(part.fd(), buf.data(), want, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) fail("cannot read '{}': {}", part.path(), r < 0 ? std::strerror(errno) : "unexpected end");
    sha.update(buf.data(), static_cast<size_t>(r));
    done += static_cast<uint64_t>(r);
    if (o.progress) o.progress("checking partial download", done, n);
  }
}

bool parse_u64(std::string_view s, uint64_t& v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

// "bytes START-END/TOTAL" (TOTAL may be "*").
struct ContentRange {
  uint64_t start = 0, end = 0;
  std::optional<uint64_t> total;
};
std::optional<ContentRange> parse_content_range(std::string_view s) {
  if (!s.starts_with("bytes ")) return std::nullopt;
  s.remove_prefix(6);
  const size_t dash = s.find('-'), slash = s.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || dash > slash) return std::nullopt;
  ContentRange r;
  if (!parse_u64(s.substr(0, dash), r.start) || !parse_u64(s.substr(dash + 1, slash - dash - 1), r.end))
    return std::nullopt;
  const std::string_view total = s.substr(slash + 1);
  if (total != "*") {
    uint64_t t = 0;
    if (!parse_u64(total, t)) return std::nullopt;
    r.total = t;
  }
  return r;
}

// What went wrong inside one transfer's callbacks.
struct AttemptState {
  bool restart = false;     // the answer does not continue the .part: empty it and ask again
  bool wrong_file = false;  // the server's file is not the expected one: remove the .part
  std::string error;        // why the transfer was aborted
};

}  // namespace

std::string part_path_of(const std::string& final_path) { return final_path + ".part"; }

void download_file(HttpClient& http, const RequestContext& ctx, const std::string& final_path,
                   const ExpectedFile& expected, const DownloadOptions& o) {
  PartFile part(part_path_of(final_path));
  uint64_t have = part.size();
  Sha256 sha;
  if (have > expected.size) {
    note(o, fmt::format("{} is larger than the file ({} bytes): starting over", part.path(), expected.size));
    part.empty();
    have = 0;
  }
  if (have > 0) {
    note(o, fmt::format("resuming {} at {} of {}", part.path(), store::format_bytes(have),
                        store::format_bytes(expected.size)));
    hash_prefix(part, have, sha, o);
  }

  int failures = 0;  // failed attempts in a row, without a byte of progress between them
  while (have < expected.size) {
    const uint64_t before = have;
    AttemptState st;
    BodySink sink;
    sink.begin = [&](long status, std::string_view content_range) {
      if (status == 206) {
        const auto cr = parse_content_range(content_range);
        if (cr && cr->total && *cr->total != expected.size) {
          st.wrong_file = true;
          st.error = fmt::format("the server's file has {} bytes, the hub's listing says {}", *cr->total,
                                 expected.size);
          return false;
        }
        if (!cr || cr->start != have) {
          st.restart = true;
          st.error =
              fmt::format("the server answered the request for bytes {}- with '{}'", have, content_range);
          return false;
        }
        return true;
      }
      if (have > 0) {  // 200: the whole file, whatever was asked
        note(o, fmt::format("the server ignored the request to resume at byte {}: downloading from the start",
                            have));
        part.empty();
        sha.reset();
        have = 0;
      }
      return true;
    };
    sink.write = [&](const char* data, size_t n) {
      if (n > expected.size - have) {
        st.wrong_file = true;
        st.error = fmt::format("the server sent more than the {} bytes of the file", expected.size);
        return false;
      }
      if (!part.write_at(have, data, n, st.error)) return false;
      sha.update(data, n);
      have += n;
      if (o.progress) o.progress("downloading", have, expected.size);
      return true;
    };
    const HttpResult r = http.fetch(ctx.url, have, sink);

    std::string retry_reason;
    switch (r.outcome) {
      case HttpResult::Outcome::kCancelled:
        part.sync();
        throw Interrupted(
            fmt::format("interrupted: {} of {} are kept in {}; run the same command again to resume",
                        store::format_bytes(have), store::format_bytes(expected.size), part.path()));
      case HttpResult::Outcome::kAborted:
        if (st.wrong_file) {
          part.close_and_remove();
          fsync_parent_dir(part.path());
          fail("{}: {}; the partial download was removed", ctx.url, st.error);
        }
        if (!st.restart)
          fail("{} (the {} downloaded so far are kept in {})", st.error, store::format_bytes(have),
               part.path());
        part.empty();
        sha.reset();
        have = 0;
        retry_reason = st.error;
        break;
      case HttpResult::Outcome::kAnswered:
        if (r.status == 200 || r.status == 206) {
          if (have == expected.size) break;
          retry_reason = fmt::format("the answer ended at byte {} of {}", have, expected.size);
        } else if (r.status == 416) {  // the .part is not a prefix the server can continue
          part.empty();
          sha.reset();
          have = 0;
          retry_reason = "the server cannot resume there (416)";
        } else if (r.retryable()) {
          retry_reason = fmt::format("HTTP {}", r.status);
        } else {
          fail_answer(r, ctx, failures + 1);
        }
        break;
      case HttpResult::Outcome::kTransient:
        retry_reason = r.error;
        break;
      case HttpResult::Outcome::kFailed:
        fail_answer(r, ctx, failures + 1);
    }
    if (retry_reason.empty()) break;
    failures = have > before ? 1 : failures + 1;
    if (failures >= o.retry.max_attempts) {
      HttpResult last = r;
      if (last.answered() && (last.status == 200 || last.status == 206)) {
        last.outcome = HttpResult::Outcome::kTransient;
        last.error = retry_reason;
      }
      if (have == 0) fail_answer(last, ctx, failures);
      try {
        fail_answer(last, ctx, failures);
      } catch (const Interrupted&) {
        throw;
      } catch (const Error& e) {
        part.sync();
        fail("{}; the {} downloaded so far are kept in {} for the next run", e.what(),
             store::format_bytes(have), part.path());
      }
    }
    note(o, fmt::format("{} at {} of {}: retrying ({} of {} tries)", retry_reason, store::format_bytes(have),
                        store::format_bytes(expected.size), failures + 1, o.retry.max_attempts));
    if (!wait_before_retry(o.retry, failures + 1, o.cancel)) {
      part.sync();
      throw Interrupted(
          fmt::format("interrupted: {} of {} are kept in {}; run the same command again to resume",
                      store::format_bytes(have), store::format_bytes(expected.size), part.path()));
    }
  }

  const std::string got = sha.hex();
  if (got != expected.sha256) {
    part.close_and_remove();
    fsync_parent_dir(part.path());
    fail(
        "sha256 mismatch for {}: expected {}, the downloaded {} hash to {}; the download was removed and "
        "nothing was ingested (run the command again; if it fails the same way, the hub's file is not the "
        "one its metadata or diskformer's pin describes)",
        ctx.file, expected.sha256, store::format_bytes(expected.size), got);
  }
  part.sync();
  part.close();
  if (::rename(part.path().c_str(), final_path.c_str()) != 0)
    fail("cannot rename '{}' to '{}': {}", part.path(), final_path, std::strerror(errno));
  fsync_parent_dir(final_path);
}

}  // namespace df::hub

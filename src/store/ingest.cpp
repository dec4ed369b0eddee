#include "store/ingest.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "gguf/gguf.h"
#include "store/ingest_steps.h"
#include "store/manifest.h"
#include "store/plan.h"
#include "store/progress.h"
#include "store/source_id.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace df::store {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string in_dir(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    fail("cannot remove '{}': {}", path, std::strerror(errno));
}

void note(const IngestOptions& opt, const std::string& text) {
  if (opt.on_message) opt.on_message(text);
}

// Holds an exclusive flock on the store directory for the whole ingest.
class DirLock {
 public:
  DirLock(const std::string& dir, bool wait, const IngestOptions& opt) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open store directory '{}': {}", dir, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    if (errno != EWOULDBLOCK) fail("cannot lock store directory '{}': {}", dir, std::strerror(errno));
    if (!wait)
      fail(
          "another `diskformer ingest` is writing {} right now; wait for it to finish (or use another -o "
          "directory)",
          dir);
    note(opt, fmt::format("waiting for another diskformer process that is ingesting into {}", dir));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) fail("cannot lock store directory '{}': {}", dir, std::strerror(errno));
  }
  ~DirLock() { ::close(fd_); }  // closing releases the lock
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Decides what to do with a directory that may hold a store already. Returns true when it holds this source's
// complete, openable store (nothing to do). Otherwise it leaves the directory without manifest.json, so from
// here on it never looks complete until the new manifest lands.
bool reuse_or_clear(const std::string& dir, const std::string& gguf_path, const SourceInfo& source,
                    const IngestOptions& opt) {
  const std::string manifest = in_dir(dir, kManifestFile);
  std::error_code ec;
  if (!fs::exists(manifest, ec)) {
    // Killed between renaming experts.bin and writing the manifest: hand the file back to the resume logic.
    if (fs::exists(in_dir(dir, kExpertsFile), ec) && !fs::exists(in_dir(dir, kExpertsPartialFile), ec))
      if (::rename(in_dir(dir, kExpertsFile).c_str(), in_dir(dir, kExpertsPartialFile).c_str()) != 0)
        fail("cannot rename '{}': {}", in_dir(dir, kExpertsFile), std::strerror(errno));
    return false;
  }
  SourceInfo owner = peek_manifest_source(read_small_file(manifest));
  auto other_model = [&](const std::string& state) {
    fail(
        "{} holds {}the store of {} (sha256 {}), not of {} (sha256 {}): choose another output directory, or "
        "add "
        "--force to replace it",
        dir, state, owner.name, owner.sha256, gguf_path, source.sha256);
  };
  if (!opt.force) {
    std::optional<Store> existing;
    std::string damage;
    try {
      existing = Store::open(dir);
    } catch (const Error& e) {
      damage = e.what();
    }
    if (existing) {
      if (existing->source().sha256 == source.sha256 && existing->source().size == source.size) return true;
      owner = existing->source();
      other_model("");
    }
    if (!owner.sha256.empty() && owner.sha256 != source.sha256) other_model("a damaged copy of ");
    note(opt, fmt::format("rebuilding {}: {}", dir, damage));
  }
  remove_file(manifest);
  fsync_parent_dir(manifest);
  // The old data files came with the old manifest, not from a journal: start over.
  remove_file(in_dir(dir, kExpertsFile));
  remove_file(in_dir(dir, kExpertsPartialFile));
  remove_file(in_dir(dir, kJournalFile));
  return false;
}

// Temporary files of an ingest that died (AtomicFile names them "<final>.tmp.<pid>"). Safe to remove: we hold
// the directory lock, so no other ingest writes here.
void remove_stale_temporaries(const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    for (const char* base : {kManifestFile, kDenseFile, kJournalFile})
      if (name.starts_with(std::string(base) + ".tmp.")) remove_file(entry.path().string());
  }
}

Json config_of(const gguf::File& src) {
  Json config = Json::object();
  std::string prefix = src.architecture() + ".";
  for (const auto& [key, v] : src.metadata()) {
    if (!key.starts_with(prefix)) continue;
    if (v.type == gguf::ValueType::BOOL)
      config[key] = v.u != 0;
    else if (v.type == gguf::ValueType::STRING)
      config[key] = v.s;
    // The shortest digits that give the same float32 (1e-05, not 9.99999974737875e-06).
    else if (v.type == gguf::ValueType::FLOAT32)
      config[key] = std::stod(fmt::format("{}", static_cast<float>(v.f)));
    else if (v.is_float())
      config[key] = v.f;
    else if (v.type == gguf::ValueType::UINT64)
      config[key] = v.u;
    else if (v.is_int())
      config[key] = v.as_int(key);
  }
  return config;
}

void write_manifest(const std::string& dir, const Manifest& m) {
  std::string text = manifest_to_string(m);
  AtomicFile f(in_dir(dir, kManifestFile));
  f.write(text.data(), text.size());
  f.commit();
}

SourceInfo identify_source(const std::string& gguf_path, const IngestOptions& opt,
                           const std::string& cache_root, double& seconds) {
  SourceInfo s;
  s.name = fs::path(gguf_path).filename().string();
  s.size = stamp_of(gguf_path).size;
  if (opt.use_index)
    if (auto sha = index_lookup(cache_root, gguf_path)) {
      s.sha256 = *sha;
      return s;
    }
  auto t0 = Clock::now();
  s.sha256 = sha256_file(gguf_path, opt.progress);
  seconds = seconds_since(t0);
  if (opt.use_index) index_remember(cache_root, gguf_path, s.sha256);
  return s;
}

// Fails before writing anything when the directory's file system cannot hold what is still to be written.
void check_free_space(const std::string& dir, const StorePlan& plan, uint64_t records_done) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return;  // unknown: let the writes report ENOSPC if it comes to that
  uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
  uint64_t needed = (plan.layout.n_records() - records_done) * plan.layout.record_bytes;
  for (const auto* t : plan.dense) needed += t->nbytes + kRecordAlign;
  if (needed > free_bytes)
    fail(
        "not enough space for the store in {}: it needs {} more, the file system has {} free; free some "
        "space or "
        "choose another directory with -o",
        dir, format_bytes(needed), format_bytes(free_bytes));
}

}  // namespace

std::string default_store_dir(const std::string& cache_root, const std::string& sha256) {
  return (fs::path(cache_root) / sha256.substr(0, 16)).string();
}

IngestResult ingest(const std::string& gguf_path, const IngestOptions& opt) {
  gguf::File src = gguf::File::open(gguf_path);
  if (src.architecture().empty()) fail("{}: no general.architecture key: not a model GGUF", gguf_path);
  StorePlan plan = plan_store(src);

  IngestResult r;
  r.layout = plan.layout;
  const std::string cache_root = opt.cache_root.empty() && (opt.use_index || opt.output_dir.empty())
                                     ? default_cache_root()
                                     : opt.cache_root;
  r.source = identify_source(gguf_path, opt, cache_root, r.hash_seconds);
  if (r.source.size != src.file_size())
    fail("{} changed while it was being read ({} bytes, then {})", gguf_path, src.file_size(), r.source.size);
  r.dir = opt.output_dir.empty() ? default_store_dir(cache_root, r.source.sha256) : opt.output_dir;

  std::error_code ec;
  fs::create_directories(r.dir, ec);
  if (ec) fail("cannot create the store directory '{}': {}", r.dir, ec.message());
  DirLock lock(r.dir, opt.wait_for_lock, opt);
  const bool complete = reuse_or_clear(r.dir, gguf_path, r.source, opt);
  remove_stale_temporaries(r.dir);
  if (complete) {
    // Left by an ingest killed after its manifest landed.
    remove_file(in_dir(r.dir, kJournalFile));
    remove_file(in_dir(r.dir, kExpertsPartialFile));
    r.already_complete = true;
    r.experts_bytes = r.layout.experts_bytes();
    r.dense_bytes = stamp_of(in_dir(r.dir, kDenseFile)).size;
    return r;
  }

  std::vector<uint64_t> checksums;
  r.records_reused = resumable_records(r.dir, r.source, plan.layout, checksums, opt);
  check_free_space(r.dir, plan, r.records_reused);
  auto hook = [&](std::string_view point) {
    if (opt.test_hook) opt.test_hook(point, plan.layout.n_records());
  };

  auto t0 = Clock::now();
  write_experts(src, plan, r.dir, r.source, r.records_reused, checksums, opt);
  r.experts_seconds = seconds_since(t0);
  r.experts_bytes = plan.layout.experts_bytes();
  hook("experts_written");

  t0 = Clock::now();
  Manifest m;
  m.dense_tensors = write_dense(src, plan, r.dir, r.source, opt);
  r.dense_seconds = seconds_since(t0);
  r.dense_bytes = stamp_of(in_dir(r.dir, kDenseFile)).size;
  hook("dense_written");

  if (::rename(in_dir(r.dir, kExpertsPartialFile).c_str(), in_dir(r.dir, kExpertsFile).c_str()) != 0)
    fail("cannot rename '{}' to '{}': {}", in_dir(r.dir, kExpertsPartialFile), kExpertsFile,
         std::strerror(errno));
  fsync_parent_dir(in_dir(r.dir, kExpertsFile));
  hook("experts_renamed");

  m.complete = true;
  m.architecture = src.architecture();
  m.config = config_of(src);
  m.source = r.source;
  m.layout = plan.layout;
  m.experts_bytes = r.experts_bytes;
  m.dense_bytes = r.dense_bytes;
  m.record_checksums = std::move(checksums);
  write_manifest(r.dir, m);
  hook("manifest_written");

  remove_file(in_dir(r.dir, kJournalFile));
  fsync_parent_dir(in_dir(r.dir, kJournalFile));
  return r;
}

std::string resolve_store(const std::string& gguf_path, IngestOptions options) {
  options.wait_for_lock = true;
  options.force = false;
  return ingest(gguf_path, options).dir;
}

}  // namespace df::store

#include "store/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "gguf/gguf.h"
#include "store/manifest.h"
#include "store/progress.h"
#include "store/record_io.h"
#include "util/error.h"

namespace df::store {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxManifestBytes = 256ull << 20;
constexpr uint64_t kVerifyChunkBytes = 64ull << 20;

std::string join_path(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open '{}': {}", path, std::strerror(errno));
  in.seekg(0, std::ios::end);
  auto size = static_cast<uint64_t>(in.tellg());
  if (size > kMaxManifestBytes) fail("'{}' is {} bytes, more than a manifest can be", path, size);
  in.seekg(0);
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (!in) fail("cannot read '{}'", path);
  return text;
}

// The fix to print when a store cannot be used: rebuild it from its source (named when the manifest says).
std::string rebuild_hint(const std::string& dir, const std::string& source_name) {
  return fmt::format("rebuild it with `diskformer ingest {} -o {}`",
                     source_name.empty() ? "MODEL.gguf" : source_name, dir);
}

bool any_exists(const std::string& dir, std::initializer_list<const char*> names) {
  std::error_code ec;
  for (const char* n : names)
    if (fs::exists(join_path(dir, n), ec)) return true;
  return false;
}

uint64_t file_size_or_fail(const std::string& dir, const char* name, const std::string& hint) {
  struct stat st {};
  std::string path = join_path(dir, name);
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) fail("store {}: {} is missing: the store is damaged; {}", dir, name, hint);
    fail("store {}: cannot stat {}: {}", dir, name, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) fail("store {}: {} is not a regular file; {}", dir, name, hint);
  return static_cast<uint64_t>(st.st_size);
}

void check_dense(const std::string& dir, const Manifest& m, const std::string& hint) {
  std::string path = join_path(dir, kDenseFile);
  gguf::File dense = [&] {
    try {
      return gguf::File::open(path);
    } catch (const Error& e) {
      fail("store {}: dense.bin is not a valid GGUF ({}); {}", dir, e.what(), hint);
    }
  }();
  if (dense.architecture() != m.architecture)
    fail(
        "store {}: dense.bin holds a '{}' model but manifest.json says '{}': the files come from different "
        "stores; {}",
        dir, dense.architecture(), m.architecture, hint);
  if (dense.alignment() != kRecordAlign)
    fail("store {}: dense.bin has alignment {}, expected {}; {}", dir, dense.alignment(), kRecordAlign, hint);
  auto sha = dense.get_string("diskformer.store.source_sha256");
  if (!sha || *sha != m.source.sha256)
    fail(
        "store {}: dense.bin was made from the source with sha256 {}, but manifest.json names sha256 {} "
        "({}): "
        "the files come from different stores; {}",
        dir, sha.value_or("(none)"), m.source.sha256, m.source.name, hint);
  const auto& tensors = dense.tensors();
  if (tensors.size() != m.dense_tensors.size())
    fail("store {}: dense.bin holds {} tensors, manifest.json lists {}; {}", dir, tensors.size(),
         m.dense_tensors.size(), hint);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const auto& e = m.dense_tensors[i];
    bool same_shape = t.n_dims == e.ne.size();
    for (size_t d = 0; same_shape && d < e.ne.size(); ++d) same_shape = t.ne[d] == e.ne[d];
    if (t.name != e.name || t.type != e.type || !same_shape || t.nbytes != e.bytes)
      fail("store {}: dense.bin tensor {} is '{}' {} {}, manifest.json lists '{}' {} ({} bytes); {}", dir, i,
           t.name, ggml_type_name(t.type), t.shape_string(), e.name, ggml_type_name(e.type), e.bytes, hint);
  }
}

}  // namespace

Store Store::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(
        "store {} does not exist or is not a directory: run `diskformer ingest MODEL.gguf -o {}` to create "
        "it",
        dir, dir);
  std::string manifest_path = join_path(dir, kManifestFile);
  if (!fs::exists(manifest_path, ec)) {
    if (any_exists(dir, {kJournalFile, kExpertsPartialFile, kExpertsFile, kDenseFile}))
      fail(
          "store {} is incomplete: it has no manifest.json, so its ingest was interrupted or is still "
          "running; "
          "re-run `diskformer ingest MODEL.gguf -o {}` to finish it",
          dir, dir);
    fail("{} is not a diskformer store (no manifest.json): run `diskformer ingest MODEL.gguf -o {}`", dir,
         dir);
  }
  std::string text = read_text(manifest_path);
  Manifest m;
  try {
    m = parse_manifest(text);
  } catch (const Error& e) {
    fail("store {}: manifest.json is unusable: {}; {}", dir, e.what(),
         rebuild_hint(dir, peek_manifest_source(text).name));
  }
  std::string hint = rebuild_hint(dir, m.source.name);
  if (!m.complete)
    fail(
        "store {} is incomplete: manifest.json does not mark it complete; re-run `diskformer ingest {} -o "
        "{}`",
        dir, m.source.name, dir);

  uint64_t experts_size = file_size_or_fail(dir, kExpertsFile, hint);
  if (experts_size != m.experts_bytes)
    fail(
        "store {}: experts.bin is {} bytes, manifest.json says {} ({} records of {} bytes): the store is "
        "damaged; "
        "{}",
        dir, experts_size, m.experts_bytes, m.layout.n_records(), m.layout.record_bytes, hint);
  uint64_t dense_size = file_size_or_fail(dir, kDenseFile, hint);
  if (dense_size != m.dense_bytes)
    fail("store {}: dense.bin is {} bytes, manifest.json says {}: the store is damaged; {}", dir, dense_size,
         m.dense_bytes, hint);
  check_dense(dir, m, hint);

  Store s;
  s.dir_ = dir;
  s.arch_ = m.architecture;
  s.source_ = m.source;
  s.layout_ = std::move(m.layout);
  s.record_checksums_ = std::move(m.record_checksums);
  for (const auto& t : m.dense_tensors) s.dense_checksums_.push_back({t.name, t.xxh3});
  s.dense_bytes_ = m.dense_bytes;
  return s;
}

std::string Store::experts_path() const { return join_path(dir_, kExpertsFile); }
std::string Store::dense_path() const { return join_path(dir_, kDenseFile); }

uint64_t Store::record_checksum(int moe_layer, int expert) const {
  if (moe_layer < 0 || moe_layer >= layout_.n_moe_layers || expert < 0 || expert >= layout_.n_expert)
    fail("store {}: no record for MoE layer {}, expert {} ({} layers x {} experts)", dir_, moe_layer, expert,
         layout_.n_moe_layers, layout_.n_expert);
  return record_checksums_[static_cast<size_t>(moe_layer) * static_cast<size_t>(layout_.n_expert) +
                           static_cast<size_t>(expert)];
}

std::string Store::reingest_command() const {
  return fmt::format("diskformer ingest {} -o {} --force", source_.name.empty() ? "MODEL.gguf" : source_.name,
                     dir_);
}

void Store::check_source(const SourceInfo& actual) const {
  bool same = actual.size == source_.size && (actual.sha256.empty() || actual.sha256 == source_.sha256);
  if (!same)
    fail(
        "store {} was made from {} ({} bytes, sha256 {}), not {} ({} bytes, sha256 {}): use that model, "
        "another "
        "store directory, or rebuild this one with `diskformer ingest {} -o {} --force`",
        dir_, source_.name, source_.size, source_.sha256, actual.name, actual.size,
        actual.sha256.empty() ? "not computed" : actual.sha256, actual.name, dir_);
}

uint64_t Store::verify(bool show_progress) const {
  TerminalProgress bar(show_progress && ::isatty(STDERR_FILENO) == 1);
  return verify(bar.fn());
}

uint64_t Store::verify(const ProgressFn& progress) const {
  const Layout& L = layout_;
  uint64_t dense_total = 0;
  gguf::File dense = gguf::File::open(dense_path());
  for (const auto& t : dense.tensors()) dense_total += t.nbytes;
  const uint64_t total = L.experts_bytes() + dense_total;
  uint64_t done = 0;

  std::string path = experts_path();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  struct FdGuard {
    int fd;
    ~FdGuard() { ::close(fd); }
  } guard{fd};
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);

  const int per_chunk =
      static_cast<int>(std::clamp<uint64_t>(kVerifyChunkBytes / L.record_bytes, 1, L.n_expert));
  std::vector<uint8_t> buf(static_cast<size_t>(per_chunk) * L.record_bytes);
  uint64_t n_bad = 0;
  std::string first_bad;
  for (int layer = 0; layer < L.n_moe_layers; ++layer) {
    for (int e0 = 0; e0 < L.n_expert; e0 += per_chunk) {
      int e1 = std::min(L.n_expert, e0 + per_chunk);
      uint64_t begin = L.record_offset(layer, e0), bytes = static_cast<uint64_t>(e1 - e0) * L.record_bytes;
      std::string what = fmt::format("the records of MoE layer {} (blk.{}), experts {}..{}, bytes [{}, {})",
                                     layer, L.layers[layer].layer, e0, e1 - 1, begin, begin + bytes);
      pread_exact(fd, path, begin, bytes, buf.data(), what);
      for (int e = e0; e < e1; ++e) {
        uint64_t got = record_xxh3(buf.data() + static_cast<size_t>(e - e0) * L.record_bytes, L.record_bytes);
        uint64_t want = record_checksum(layer, e);
        if (got != want && n_bad++ == 0)
          first_bad = fmt::format("{} has xxh3 {:016x}, manifest.json says {:016x}",
                                  describe_record(L, layer, e), got, want);
      }
      done += bytes;
      if (progress) progress("verifying", done, total);
    }
  }
  if (n_bad > 0)
    fail(
        "store {}: {} of {} records in experts.bin do not match their checksums; the first: {}: the store is "
        "damaged; re-run `{}`",
        dir_, n_bad, L.n_records(), first_bad, reingest_command());

  std::vector<uint8_t> tbuf;
  for (size_t i = 0; i < dense.tensors().size(); ++i) {
    const auto& t = dense.tensors()[i];
    tbuf.resize(t.nbytes);
    dense.read_tensor(t, tbuf.data());
    uint64_t got = record_xxh3(tbuf.data(), t.nbytes);
    if (i >= dense_checksums_.size() || dense_checksums_[i].name != t.name)
      fail("store {}: dense.bin tensor {} '{}' is not in manifest.json; re-run `{}`", dir_, i, t.name,
           reingest_command());
    if (got != dense_checksums_[i].xxh3)
      fail(
          "store {}: dense.bin tensor '{}' (bytes [{}, {})) has xxh3 {:016x}, manifest.json says {:016x}: "
          "the "
          "store is damaged; re-run `{}`",
          dir_, t.name, t.file_offset, t.file_offset + t.nbytes, got, dense_checksums_[i].xxh3,
          reingest_command());
    done += t.nbytes;
    if (progress) progress("verifying", done, total);
  }
  return done;
}

}  // namespace df::store

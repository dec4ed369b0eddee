#include "hub/pull.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "hub/download.h"
#include "hub/hf_api.h"
#include "hub/interrupt.h"
#include "hub/local_models.h"
#include "hub/names.h"
#include "store/ingest.h"
#include "store/manifest.h"
#include "store/progress.h"
#include "store/source_id.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace df::hub {

namespace {

namespace fs = std::filesystem;

void note(const PullOptions& o, const std::string& s) {
  if (o.on_message) o.on_message(s);
}

std::string token_of(const PullOptions& o) {
  if (!o.token.empty()) return o.token;
  const char* t = std::getenv("HF_TOKEN");
  return t ? t : "";
}

// The file the reference names, with the sha256 and size to check it against.
struct Target {
  RepoFile file;
  std::string commit;
};

Target find_target(HttpClient& http, const ModelRef& ref, const std::string& endpoint, bool has_token,
                   const PullOptions& o, const std::atomic<bool>* cancel) {
  const RepoListing listing =
      fetch_listing(http, endpoint, ref.repo, ref.revision, has_token, o.retry, cancel);
  Target t{choose_file(listing, ref.selector, ref.repo, ref.revision), listing.commit};
  if (t.file.sha256.empty())
    fail(
        "the hub gives no sha256 for {} in {} (it is not stored in LFS): diskformer does not download a "
        "model "
        "it cannot verify",
        t.file.path, ref.repo);
  if (t.file.size == 0) fail("the hub lists {} in {} with 0 bytes", t.file.path, ref.repo);
  if (ref.pin &&
      (t.file.sha256 != ref.pin->sha256 || t.file.size != ref.pin->size || t.commit != ref.pin->revision))
    fail(
        "the hub's metadata for {} in {} at {} disagrees with diskformer's pin of it: sha256 {}, {} bytes, "
        "pinned sha256 {}, {} bytes; refusing to download",
        t.file.path, ref.repo, ref.revision, t.file.sha256, t.file.size, ref.pin->sha256, ref.pin->size);
  return t;
}

uint64_t file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const uint64_t n = fs::file_size(path, ec);
  return ec ? 0 : n;
}

uint64_t free_bytes(const std::string& dir, const PullOptions& o) {
  if (o.free_bytes_for_test) return *o.free_bytes_for_test;
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0)
    fail("cannot ask the file system of {} for its free space: {}", dir, std::strerror(errno));
  return static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
}

void check_space(const std::string& dir, const std::string& file, uint64_t download, uint64_t store,
                 const PullOptions& o) {
  const uint64_t needed = download + store;
  const uint64_t have = free_bytes(dir, o);
  if (needed <= have) return;
  fail(
      "not enough disk space in {}: {} needs {} ({} still to download + about {} for its expert store), the "
      "file system has {} free; free some space or choose another directory with -o",
      dir, file, store::format_bytes(needed), store::format_bytes(download), store::format_bytes(store),
      store::format_bytes(have));
}

// The store in `dir` is complete and of this sha256.
bool store_holds(const std::string& dir, const std::string& sha256) {
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / store::kManifestFile, ec)) return false;
  try {
    return store::Store::open(dir).source().sha256 == sha256;
  } catch (const Error&) {
    return false;
  }
}

// Who owns the manifest in `dir`, even if the store is damaged ("" when there is none).
std::string manifest_owner(const std::string& dir) {
  std::ifstream in(fs::path(dir) / store::kManifestFile, std::ios::binary);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return store::peek_manifest_source(ss.str()).sha256;
}

void remove_if_there(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    fail("cannot remove '{}': {}", path, std::strerror(errno));
}

}  // namespace

uint64_t store_bytes_estimate(uint64_t gguf_bytes) { return gguf_bytes + gguf_bytes / 64 + (64ull << 20); }

PullResult pull(const ModelRef& ref, const PullOptions& o) {
  const std::string endpoint = resolve_endpoint(o.endpoint);
  const std::string cache_root = o.cache_root.empty() ? store::default_cache_root() : o.cache_root;
  const std::string token = token_of(o);
  std::unique_ptr<SigintFlag> sigint;
  if (o.catch_sigint) sigint = std::make_unique<SigintFlag>();
  const std::atomic<bool>* cancel = sigint ? sigint->flag() : o.cancel;
  HttpOptions ho;
  ho.token = token;
  ho.cancel = cancel;
  HttpClient http(ho);

  const Target t = find_target(http, ref, endpoint, !token.empty(), o, cancel);
  PullResult result;
  result.dir = o.output_dir.empty()
                   ? (fs::path(models_dir(cache_root)) / entry_name(ref.repo, t.file.path)).string()
                   : o.output_dir;
  std::error_code ec;
  fs::create_directories(result.dir, ec);
  if (ec) fail("cannot create '{}': {}", result.dir, ec.message());
  const EntryLock lock(result.dir, o.wait_for_lock);

  const std::optional<PullRecord> old = read_record(result.dir);
  if (old && (to_lower(old->repo) != to_lower(ref.repo) || old->file != t.file.path))
    fail("{} holds {}/{}, not {}/{}: choose another directory with -o, or `diskformer rm` it first",
         result.dir, old->repo, old->file, ref.repo, t.file.path);
  const std::string owner = manifest_owner(result.dir);
  if (!old && !owner.empty() && owner != t.file.sha256)
    fail("{} holds the expert store of another model (sha256 {}); choose another directory with -o",
         result.dir, owner);
  PullRecord& rec = result.record;
  rec.repo = ref.repo;
  rec.file = t.file.path;
  rec.revision = ref.revision;
  rec.commit = t.commit;
  rec.sha256 = t.file.sha256;
  rec.size = t.file.size;
  rec.endpoint = endpoint;
  rec.pulled_at = old && old->sha256 == rec.sha256 ? old->pulled_at : now_seconds();
  rec.last_used = old ? old->last_used : 0;
  const std::string gguf = (fs::path(result.dir) / fs::path(t.file.path).filename()).string();

  if (store_holds(result.dir, rec.sha256)) {
    rec.complete = true;
    rec.gguf_kept = fs::exists(gguf, ec);
    write_record(result.dir, rec);
    result.already_there = true;
    if (rec.gguf_kept) result.gguf_path = gguf;
    note(o, fmt::format("{} is already pulled: {}", t.file.path, result.dir));
    if (o.keep_gguf && !rec.gguf_kept)
      note(o,
           fmt::format("its GGUF was deleted after the ingest; to have it, `diskformer rm {}` and pull again "
                       "with --keep-gguf",
                       fs::path(result.dir).filename().string()));
    return result;
  }
  if (old && old->sha256 != rec.sha256) {  // another revision's bytes: no prefix of this file
    remove_if_there(part_path_of(gguf));
    remove_if_there(gguf);
  }
  rec.complete = false;
  rec.gguf_kept = false;
  write_record(result.dir, rec);

  // A GGUF under its final name was verified before its rename; its stamp tells whether it changed since.
  bool have_gguf = false;
  if (fs::exists(gguf, ec)) {
    have_gguf = store::index_lookup(cache_root, gguf) == rec.sha256;
    if (!have_gguf) {
      note(o, fmt::format("{} is there but not known as the verified download: downloading it again", gguf));
      remove_if_there(gguf);
    }
  }
  const uint64_t to_download =
      have_gguf ? 0 : rec.size - std::min(rec.size, file_size_or_zero(part_path_of(gguf)));
  check_space(result.dir, t.file.path, to_download, store_bytes_estimate(rec.size), o);

  if (!have_gguf) {
    DownloadOptions d;
    d.retry = o.retry;
    d.progress = o.progress;
    d.on_message = o.on_message;
    d.cancel = cancel;
    const RequestContext ctx{ref.repo, ref.revision, t.file.path,
                             file_url(endpoint, ref.repo, t.commit, t.file.path), !token.empty()};
    download_file(http, ctx, gguf, ExpectedFile{rec.size, rec.sha256}, d);
    store::index_remember(cache_root, gguf, rec.sha256);  // the ingest then skips its own hashing pass
  }
  sigint.reset();  // an ingest is resumable: from here Ctrl-C stops the process as usual

  store::IngestOptions io;
  io.output_dir = result.dir;
  io.cache_root = cache_root;
  io.wait_for_lock = true;
  io.force = !owner.empty() && owner != rec.sha256;  // the store of an earlier revision: rebuilt
  io.progress = o.progress;
  io.on_message = o.on_message;
  const store::IngestResult ingested = store::ingest(gguf, io);
  if (ingested.source.sha256 != rec.sha256)
    fail("{} changed after it was verified (sha256 {}, expected {}); run the pull again", gguf,
         ingested.source.sha256, rec.sha256);

  if (o.keep_gguf) {
    result.gguf_path = gguf;
  } else {
    remove_if_there(gguf);
    fsync_parent_dir(gguf);
  }
  rec.complete = true;
  rec.gguf_kept = o.keep_gguf;
  write_record(result.dir, rec);
  return result;
}

std::string resolve_hf(const std::string& spec, const PullOptions& o) {
  const ModelRef ref = parse_model_ref(spec);
  const std::string cache_root = o.cache_root.empty() ? store::default_cache_root() : o.cache_root;
  std::string dir;
  if (auto local = find_pulled(cache_root, ref)) {
    dir = local->dir;
  } else {
    PullOptions po = o;
    po.cache_root = cache_root;
    po.output_dir.clear();
    dir = pull(ref, po).dir;
  }
  // Best effort: a model in use by a pull elsewhere keeps its old date.
  try {
    const EntryLock lock(dir, /*wait=*/false);
    if (auto rec = read_record(dir)) {
      rec->last_used = now_seconds();
      write_record(dir, *rec);
    }
  } catch (const Error&) {
  }
  return dir;
}

}  // namespace df::hub

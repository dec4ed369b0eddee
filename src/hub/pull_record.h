#pragma once
// Where pulled models live and what is remembered about each:
//   CACHE/models/NAME/              one entry per (repository, file): it is the model's expert store
//                                   (manifest.json, experts.bin, dense.bin), so `run -m` takes it as is
//   CACHE/models/NAME/pull.json     what was pulled: repository, file, commit, sha256, size, endpoint, when,
//                                   last use, state; written atomically (util/atomic_file.h)
//   CACHE/models/NAME/FILE          the GGUF while it downloads (FILE.part) and until it is ingested; kept
//                                   afterwards only with --keep-gguf
//   CACHE/models/NAME/pull.lock     flock'ed while a pull or an rm works on the entry
// NAME is ORG--REPO--FILE without ".gguf" ('/' in FILE becomes "--"); the hub's names never hold "--".
#include <cstdint>
#include <optional>
#include <string>

namespace df::hub {

constexpr const char* kRecordFile = "pull.json";
constexpr const char* kLockFile = "pull.lock";

std::string models_dir(const std::string& cache_root);
std::string entry_name(const std::string& repo, const std::string& file);

struct PullRecord {
  std::string repo, file;
  std::string revision;  // as asked for ("main", a tag, a commit)
  std::string commit;    // what it was
  std::string sha256;
  uint64_t size = 0;
  std::string endpoint;
  int64_t pulled_at = 0;  // unix seconds; when the pull started
  int64_t last_used = 0;  // 0: never run
  bool complete = false;  // the store is complete and of this sha256
  bool gguf_kept = false;
};

// nullopt when the directory has no pull.json; df::Error naming the field when it is damaged.
std::optional<PullRecord> read_record(const std::string& dir);
void write_record(const std::string& dir, const PullRecord& record);
int64_t now_seconds();

// An exclusive flock on DIR/pull.lock (created if missing), released when this goes.
class EntryLock {
 public:
  // wait: block until another process lets go; else fail saying another diskformer is at work there.
  EntryLock(const std::string& dir, bool wait);
  ~EntryLock();
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace df::hub

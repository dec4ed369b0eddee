#pragma once
// `diskformer ingest`: GGUF -> expert store (store.h).
//
// Order of work, so that a killed ingest never leaves a directory that looks complete:
//   1. sha256 of the source (or the remembered one, source_id.h), in its own sequential pass: the store
//      directory's default name and the resume check need it before anything is written. The source is thus
//      read twice (hash, then copy); the copy pass reads each MoE layer's expert tensors in bounded batches.
//   2. experts.bin.partial: records written in order; every checkpoint_bytes the file is fdatasync'ed and the
//      journal ingest.partial (records done + their xxh3) is rewritten atomically.
//   3. dense.bin (via gguf::Writer: temporary name, fsync, rename).
//   4. experts.bin.partial renamed to experts.bin.
//   5. manifest.json with "complete": true (temporary name, fsync, rename) -- the store exists from here on;
//      then the journal is removed.
// Resume: an ingest into a directory with a journal for the same source sha256 and the same layout re-reads
// the journal's records, keeps the leading run whose checksums match and continues after it; anything else
// (no journal, another source, another layout) restarts from record 0. dense.bin is always rewritten.
// One ingest per directory at a time (flock on the directory).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "store/store.h"

namespace df::store {

struct IngestOptions {
  std::string output_dir;  // empty: <cache_root>/<first 16 hex digits of the source's sha256>
  std::string cache_root;  // empty: default_cache_root(); holds the sha256 index and the default stores
  bool force = false;      // rebuild even if the directory holds a complete store (of this or another model)
  bool use_index = true;   // remember / look up the source's sha256 (source_id.h)
  bool wait_for_lock = false;  // wait for another ingest of the same directory instead of failing
  ProgressFn progress;  // phases: "hashing source", "checking partial", "writing experts", "writing dense"
  std::function<void(const std::string&)> on_message;  // one-line notes: resuming, reusing, rebuilding
  uint64_t memory_budget = 256ull << 20;               // staging + output buffers of one batch of records
  uint64_t checkpoint_bytes = 1ull << 30;  // records between journal updates (0: after every batch)
  // Tests only: called at "checkpoint" (records done so far), "experts_written", "dense_written",
  // "experts_renamed", "manifest_written". A test kills the process or throws here to simulate a crash.
  std::function<void(std::string_view point, uint64_t records_done)> test_hook;
};

struct IngestResult {
  std::string dir;
  SourceInfo source;
  Layout layout;
  bool already_complete = false;  // the directory already held this source's complete store
  uint64_t records_reused = 0;    // records kept from an interrupted ingest
  uint64_t experts_bytes = 0, dense_bytes = 0;
  double hash_seconds = 0, experts_seconds = 0, dense_seconds = 0;
};

IngestResult ingest(const std::string& gguf_path, const IngestOptions& options);

// The store of `gguf_path` (options.output_dir, or the default cache directory), ingested first if it is not
// there yet: what `run`/`chat` call on a .gguf. Waits for a concurrent ingest of the same directory.
std::string resolve_store(const std::string& gguf_path, IngestOptions options);

// <cache_root>/<first 16 hex digits of sha256>
std::string default_store_dir(const std::string& cache_root, const std::string& sha256);

}  // namespace df::store

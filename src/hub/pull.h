#pragma once
// `diskformer pull` and `-hf`: a model from the hub into an expert store, in one go.
//   1. the file: the listing of the repository at the revision (hf_api.h), the file chosen (file_choice.h),
//      its sha256 and size from the listing, checked against the built-in pin if there is one;
//   2. disk space for the rest of the download and the store, checked before a byte is written;
//   3. the download (download.h): resumable, retried, verified, renamed;
//   4. the ingest into the entry directory (store/ingest.h), told the verified sha256 so that it does not
//      hash 13 GB again; then the GGUF is deleted unless keep_gguf.
// pull.json (pull_record.h) says at every step what the entry holds. One pull per entry at a time.
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "hub/model_ref.h"
#include "hub/pull_record.h"
#include "hub/retry.h"
#include "store/store.h"

namespace df::hub {

struct PullOptions {
  std::string endpoint;    // empty: resolve_endpoint("") ($HF_ENDPOINT or the public hub)
  std::string token;       // empty: $HF_TOKEN
  std::string cache_root;  // empty: store::default_cache_root()
  std::string output_dir;  // -o: the entry directory instead of CACHE/models/NAME
  bool keep_gguf = false;
  bool wait_for_lock = false;  // another process pulling the same entry: wait instead of failing
  bool catch_sigint = false;   // Ctrl-C stops the download and keeps the .part (interrupt.h)
  RetryPolicy retry = RetryPolicy::from_env();
  store::ProgressFn progress;
  std::function<void(const std::string&)> on_message;
  const std::atomic<bool>* cancel = nullptr;  // tests: stop as Ctrl-C would
  // Tests: the free bytes of the entry's file system instead of statvfs.
  std::optional<uint64_t> free_bytes_for_test;
};

struct PullResult {
  std::string dir;  // the expert store (run -m DIR)
  PullRecord record;
  bool already_there = false;  // the store was complete: nothing downloaded or ingested
  std::string gguf_path;       // the GGUF, when kept
};

PullResult pull(const ModelRef& ref, const PullOptions& options);

// What -hf REPO[:QUANT] runs: a complete pulled store of `spec` when there is exactly one (no network, so a
// pulled model runs offline), else pull(). Records the use (`diskformer list` shows it). Returns the store.
std::string resolve_hf(const std::string& spec, const PullOptions& options);

// The disk space a pull still needs: the rest of the download and, unless it is complete already, the store
// (its records are the GGUF's expert bytes padded to 4096, plus the dense part: about the GGUF's size).
uint64_t store_bytes_estimate(uint64_t gguf_bytes);

}  // namespace df::hub

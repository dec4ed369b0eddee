#pragma once
// One file from the hub to disk, never half-written under its final name:
//   FILE.part receives the bytes; a .part left by an earlier run is hashed and continued with
//   "Range: bytes=N-" (a server that answers 200 instead of 206 is followed from byte 0, the .part emptied
//   first). The sha256 is computed as the bytes arrive. Timeouts, dropped connections and 5xx are retried
//   with backoff (hub/retry.h); every retry resumes where the last one stopped.
//   Once all bytes are there, size and sha256 are compared with what was expected: a mismatch removes the
//   .part and fails; a match is fsynced and renamed to FILE.
// Cancelled (the flag, e.g. by SIGINT), the .part is flushed and kept for the next run, and df::Interrupted
// says so.
#include <atomic>
#include <functional>
#include <string>

#include "hub/hf_api.h"
#include "hub/http.h"
#include "hub/retry.h"
#include "store/store.h"

namespace df::hub {

struct ExpectedFile {
  uint64_t size = 0;
  std::string sha256;  // lowercase hex
};

struct DownloadOptions {
  RetryPolicy retry;
  store::ProgressFn progress;  // ("checking partial download" | "downloading", done, total)
  std::function<void(const std::string&)> on_message;
  const std::atomic<bool>* cancel = nullptr;
};

std::string part_path_of(const std::string& final_path);

// `ctx` describes the request for the error messages (hf_api.h: fail_answer).
void download_file(HttpClient& http, const RequestContext& ctx, const std::string& final_path,
                   const ExpectedFile& expected, const DownloadOptions& options);

}  // namespace df::hub

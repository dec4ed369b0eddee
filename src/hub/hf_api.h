#pragma once
// The Hugging Face hub's URL scheme and what its answers mean for a user:
//   listing:  {endpoint}/api/models/{repo}/revision/{revision}?blobs=true   (hf_listing.h)
//   download: {endpoint}/{repo}/resolve/{commit}/{file}                     (redirects to a CDN)
// The endpoint is --hf-endpoint, else $HF_ENDPOINT, else https://huggingface.co.
#include <atomic>
#include <string>
#include <string_view>

#include "hub/hf_listing.h"
#include "hub/http.h"
#include "hub/retry.h"

namespace df::hub {

constexpr const char* kDefaultEndpoint = "https://huggingface.co";

// `flag` if given, else $HF_ENDPOINT, else the public hub; checked to be an http(s) URL, trailing '/'
// removed.
std::string resolve_endpoint(std::string_view flag);

std::string listing_url(const std::string& endpoint, const std::string& repo, const std::string& revision);
std::string file_url(const std::string& endpoint, const std::string& repo, const std::string& commit,
                     const std::string& file);

// What a failed answer means, in words: 404 names what does not exist, 401/403 say whether HF_TOKEN is
// missing or was refused. `file` empty: the answer to a listing.
struct RequestContext {
  std::string repo, revision, file, url;
  bool has_token = false;
};
[[noreturn]] void fail_answer(const HttpResult& r, const RequestContext& ctx, int attempts);

// The listing of `repo` at `revision`, retried per `policy`.
RepoListing fetch_listing(HttpClient& http, const std::string& endpoint, const std::string& repo,
                          const std::string& revision, bool has_token, const RetryPolicy& policy,
                          const std::atomic<bool>* cancel);

}  // namespace df::hub

#include "hub/hf_api.h"

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "hub/names.h"
#include "util/error.h"

namespace df::hub {

namespace {

// The hub explains refusals as {"error": "..."}; it is shown (printable ASCII only, shortened) because it
// often says what to do ("Access to model X is restricted ...").
std::string server_says(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("error") || !j["error"].is_string()) return {};
  std::string text;
  for (char c : j["error"].get<std::string>())
    if (c >= 0x20 && c < 0x7f && text.size() < 300) text.push_back(c);
  return text.empty() ? text : " (the hub says: " + text + ")";
}

std::string what_of(const RequestContext& ctx) {
  return ctx.file.empty() ? fmt::format("{} at revision {}", ctx.repo, ctx.revision)
                          : fmt::format("{} in {} at revision {}", ctx.file, ctx.repo, ctx.revision);
}

}  // namespace

std::string resolve_endpoint(std::string_view flag) {
  std::string e(flag);
  if (e.empty())
    if (const char* env = std::getenv("HF_ENDPOINT"); env && *env) e = env;
  if (e.empty()) e = kDefaultEndpoint;
  const std::string given = e;
  while (e.ends_with('/')) e.pop_back();
  const std::string_view rest = std::string_view(e).substr(e.starts_with("https://") ? 8 : 7);
  if ((!e.starts_with("http://") && !e.starts_with("https://")) || rest.empty() ||
      rest.find_first_of(" \t\r\n?#") != std::string_view::npos)
    fail("--hf-endpoint / HF_ENDPOINT '{}' is not an http:// or https:// URL", given);
  return e;
}

std::string listing_url(const std::string& endpoint, const std::string& repo, const std::string& revision) {
  return endpoint + "/api/models/" + repo + "/revision/" + percent_encode(revision, false) + "?blobs=true";
}

std::string file_url(const std::string& endpoint, const std::string& repo, const std::string& commit,
                     const std::string& file) {
  return endpoint + "/" + repo + "/resolve/" + percent_encode(commit, false) + "/" +
         percent_encode(file, true);
}

void fail_answer(const HttpResult& r, const RequestContext& ctx, int attempts) {
  const std::string what = what_of(ctx);
  if (r.outcome == HttpResult::Outcome::kCancelled) throw Interrupted("interrupted");
  if (!r.answered()) {
    if (r.outcome == HttpResult::Outcome::kTransient)
      fail("cannot get {}: {} (gave up after {} attempt{}; {})", what, r.error, attempts,
           attempts == 1 ? "" : "s", ctx.url);
    fail("cannot get {}: {} ({})", what, r.error, ctx.url);
  }
  const std::string says = server_says(r.body);
  switch (r.status) {
    case 404:
      if (ctx.file.empty())
        fail("no such model or revision: the hub has no repository {} with a revision '{}' (404 from {}){}",
             ctx.repo, ctx.revision, ctx.url, says);
      fail("no such file: {} has no '{}' at revision {} (404 from {}){}", ctx.repo, ctx.file, ctx.revision,
           ctx.url, says);
    case 401:
      if (!ctx.has_token)
        fail(
            "{}: the hub answered 401 Unauthorized: the repository does not exist, or it is gated or private "
            "and needs a token: set HF_TOKEN to a Hugging Face access token{}",
            what, says);
      fail("{}: the hub refused HF_TOKEN (401 Unauthorized): check that the token is valid{}", what, says);
    case 403:
      if (!ctx.has_token)
        fail("{}: the hub answered 403 Forbidden: this repository needs a token: set HF_TOKEN{}", what, says);
      fail(
          "{}: HF_TOKEN was refused for this repository (403 Forbidden): accept the model's terms on its "
          "page "
          "or ask for access{}",
          what, says);
    default:
      if (r.status >= 500 || r.status == 429)
        fail("{}: the hub keeps failing: HTTP {} after {} attempt{} ({}){}", what, r.status, attempts,
             attempts == 1 ? "" : "s", ctx.url, says);
      fail("{}: unexpected HTTP status {} from {}{}", what, r.status, ctx.url, says);
  }
}

RepoListing fetch_listing(HttpClient& http, const std::string& endpoint, const std::string& repo,
                          const std::string& revision, bool has_token, const RetryPolicy& policy,
                          const std::atomic<bool>* cancel) {
  RequestContext ctx{repo, revision, {}, listing_url(endpoint, repo, revision), has_token};
  for (int attempt = 1;; ++attempt) {
    HttpResult r = http.get(ctx.url, kMaxListingBytes);
    if (r.answered() && r.status == 200)
      return parse_listing(r.body, revision, fmt::format("the hub's listing of {} at {}", repo, revision));
    if (!r.retryable() || attempt >= policy.max_attempts) fail_answer(r, ctx, attempt);
    if (!wait_before_retry(policy, attempt + 1, cancel)) throw Interrupted("interrupted");
  }
}

}  // namespace df::hub

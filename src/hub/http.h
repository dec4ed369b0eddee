#pragma once
// HTTP GETs with libcurl: redirects followed (http and https only), a bearer token that curl keeps from
// other hosts after a redirect, connect and stall timeouts, and a cancel flag polled while a transfer waits.
// The result says whether a failure is worth a retry (timeouts, dropped connections, 5xx are; a bad URL or
// certificate is not).
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace df::hub {

struct HttpOptions {
  std::string token;  // sent as "Authorization: Bearer TOKEN" when not empty
  long connect_timeout_s = 30;
  long stall_timeout_s = 60;                  // no byte for this long: the transfer is abandoned as a timeout
  long small_request_timeout_s = 300;         // get(): the whole answer within this time
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. by SIGINT): the transfer stops at once
};

struct HttpResult {
  enum class Outcome { kAnswered, kTransient, kCancelled, kAborted, kFailed };
  Outcome outcome = Outcome::kFailed;
  long status = 0;    // the final answer's status (kAnswered; also set after a cut answer)
  std::string error;  // curl's reason, for kTransient / kFailed
  std::string body;   // get(): the body; fetch(): the start of a body that was not 200/206
  bool answered() const { return outcome == Outcome::kAnswered; }
  bool retryable() const {
    return outcome == Outcome::kTransient ||
           (answered() && (status >= 500 || status == 429 || status == 408));
  }
};

// Receives the body of a 200 or 206 answer. begin() sees the status and the Content-Range header before the
// first byte; returning false from either aborts the transfer (outcome kAborted).
struct BodySink {
  std::function<bool(long status, std::string_view content_range)> begin;
  std::function<bool(const char* data, size_t n)> write;
};

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // The whole body, refused (kFailed) beyond max_bytes.
  HttpResult get(const std::string& url, size_t max_bytes);
  // The body from byte `offset` on ("Range: bytes=OFFSET-" when offset > 0) into `sink`.
  HttpResult fetch(const std::string& url, uint64_t offset, const BodySink& sink);

 private:
  struct Transfer;
  HttpResult perform(const std::string& url, uint64_t offset, Transfer& t);
  HttpOptions options_;
  void* curl_ = nullptr;  // CURL*, reused so that connections are kept alive
};

// "a b/c" -> "a%20b/c" with `keep_slash`; RFC 3986 unreserved characters stay as they are.
std::string percent_encode(std::string_view s, bool keep_slash);

}  // namespace df::hub

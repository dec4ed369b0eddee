#include "hub/http.h"

#include <curl/curl.h>

#include <cctype>
#include <mutex>

#include "util/error.h"

namespace df::hub {

namespace {

constexpr size_t kErrorBodyBytes = 4096;

// Any count other than the one given aborts a transfer; curl 7.87 named the value.
#ifdef CURL_WRITEFUNC_ERROR
constexpr size_t kWriteAbort = CURL_WRITEFUNC_ERROR;
#else
constexpr size_t kWriteAbort = 0xFFFFFFFF;
#endif

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail("libcurl could not be initialised");
  });
}

bool is_transient(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

bool ci_starts_with(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i])))
      return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  return s;
}

}  // namespace

// One request's state, reached from curl's callbacks.
struct HttpClient::Transfer {
  CURL* curl = nullptr;
  const HttpOptions* options = nullptr;
  const BodySink* sink = nullptr;  // null: collect the body (get)
  size_t max_bytes = 0;
  bool too_large = false;
  bool error_body_full = false;  // a refusal's body reached kErrorBodyBytes: the rest is not waited for
  bool started = false;  // the current answer's status is known and was handed to the sink
  bool to_sink = false;  // the current answer is 200/206 and goes to the sink
  bool aborted = false;
  std::string content_range;
  std::string body;

  static size_t on_header(char* data, size_t size, size_t n, void* self) {
    auto* t = static_cast<Transfer*>(self);
    const std::string_view line(data, size * n);
    if (line.starts_with("HTTP/")) {  // a new answer (after a redirect, or a 100 Continue)
      t->content_range.clear();
      t->started = false;
    } else if (ci_starts_with(line, "content-range:")) {
      t->content_range = std::string(trim(line.substr(14)));
    }
    return size * n;
  }

  static size_t on_body(char* data, size_t size, size_t n, void* self) {
    auto* t = static_cast<Transfer*>(self);
    const size_t bytes = size * n;
    if (!t->started) {
      t->started = true;
      long status = 0;
      curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
      t->to_sink = t->sink && (status == 200 || status == 206);
      if (t->to_sink && !t->sink->begin(status, t->content_range)) {
        t->aborted = true;
        return kWriteAbort;
      }
    }
    if (t->to_sink) {
      if (!t->sink->write(data, bytes)) {
        t->aborted = true;
        return kWriteAbort;
      }
      return bytes;
    }
    const size_t cap = t->sink ? kErrorBodyBytes : t->max_bytes;
    if (t->body.size() + bytes > cap) {
      if (t->sink) {
        t->body.append(data, cap - t->body.size());
        t->error_body_full = true;
      } else {
        t->too_large = true;
      }
      return kWriteAbort;
    }
    t->body.append(data, bytes);
    return bytes;
  }

  static int on_progress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* t = static_cast<Transfer*>(self);
    return t->options->cancel && t->options->cancel->load() ? 1 : 0;
  }
};

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) {
  global_init();
  for (char c : options_.token)
    if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f)
      fail("HF_TOKEN holds a space or control character: it cannot be sent as a header");
  curl_ = curl_easy_init();
  if (!curl_) fail("libcurl could not make a transfer handle");
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResult HttpClient::perform(const std::string& url, uint64_t offset, Transfer& t) {
  CURL* c = static_cast<CURL*>(curl_);
  curl_easy_reset(c);
  t.curl = c;
  t.options = &options_;
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(c, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, options_.connect_timeout_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, options_.stall_timeout_s);
  // A listing is small: one that trickles for minutes is a broken or hostile server. A file may take hours.
  if (!t.sink) curl_easy_setopt(c, CURLOPT_TIMEOUT, options_.small_request_timeout_s);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "diskformer/0.1");
  // Compressed answers for the JSON only: a file's bytes and its Range offsets must be the stored ones.
  if (!t.sink) curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &Transfer::on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Transfer::on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &Transfer::on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
  const std::string range = std::to_string(offset) + "-";
  if (offset > 0) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  curl_slist* headers = nullptr;
  const std::string auth = "Authorization: Bearer " + options_.token;
  if (!options_.token.empty()) headers = curl_slist_append(headers, auth.c_str());
  if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);

  const CURLcode code = curl_easy_perform(c);
  curl_slist_free_all(headers);
  HttpResult r;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  r.body = std::move(t.body);
  r.error = error[0] ? error : curl_easy_strerror(code);
  if (code == CURLE_OK) {
    r.outcome = HttpResult::Outcome::kAnswered;
    r.error.clear();
  } else if (code == CURLE_ABORTED_BY_CALLBACK) {
    r.outcome = HttpResult::Outcome::kCancelled;
  } else if (code == CURLE_WRITE_ERROR && t.aborted) {
    r.outcome = HttpResult::Outcome::kAborted;
  } else if (code == CURLE_WRITE_ERROR && t.error_body_full) {
    r.outcome =
        HttpResult::Outcome::kAnswered;  // the status is what matters; the body was only an explanation
    r.error.clear();
  } else if (code == CURLE_WRITE_ERROR && t.too_large) {
    r.outcome = HttpResult::Outcome::kFailed;
    r.error = "the answer is larger than " + std::to_string(t.max_bytes) + " bytes";
  } else {
    r.outcome = is_transient(code) ? HttpResult::Outcome::kTransient : HttpResult::Outcome::kFailed;
  }
  return r;
}

HttpResult HttpClient::get(const std::string& url, size_t max_bytes) {
  Transfer t;
  t.max_bytes = max_bytes;
  return perform(url, 0, t);
}

HttpResult HttpClient::fetch(const std::string& url, uint64_t offset, const BodySink& sink) {
  Transfer t;
  t.sink = &sink;
  return perform(url, offset, t);
}

std::string percent_encode(std::string_view s, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string r;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                            c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
    if (unreserved) {
      r.push_back(ch);
    } else {
      r.push_back('%');
      r.push_back(kDigits[c >> 4]);
      r.push_back(kDigits[c & 15]);
    }
  }
  return r;
}

}  // namespace df::hub

#pragma once
// An in-process `serve` on a golden tiny model, on a free loopback port, and a small client for it
// (cpp-httplib's), for the server's tests.
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model_source.h"
#include "golden_json.h"
#include "server/http_server.h"
#include "server/scheduler.h"
#include "store/ingest.h"

namespace df::testing {

struct ServerSetup {
  std::string model = "lfm2moe-tiny";
  int slots = 2;
  int n_ctx = 512;
  std::string api_key;
  size_t max_body = 1u << 20;
  int64_t eio_on_read = -1;  // an expert read that fails (stream::FaultPlan)
  bool resident = false;
};

// The golden model's expert store, ingested once under the test's scratch folder.
inline std::string test_store(const std::string& model) {
  store::IngestOptions o;
  o.output_dir = std::string(DF_TEST_TMP) + "/stores/" + model;
  o.use_index = false;
  o.wait_for_lock = true;  // the tests of a file run in parallel processes and share the store
  return store::resolve_store(golden_path(model + ".gguf"), o);
}

class TestServer {
 public:
  explicit TestServer(const ServerSetup& s = {}) {
    ModelSourceOptions o;
    o.path = s.resident ? golden_path(s.model + ".gguf") : test_store(s.model);
    o.resident = s.resident;
    o.n_threads = 1;
    o.n_ctx = s.n_ctx;
    o.prefill_chunk = 16;
    o.prompt_snapshot = true;
    o.n_sequences = s.slots;
    o.lookahead = 0;
    o.faults.eio_on_read = s.eio_on_read;
    o.notice = [](const std::string&) {};
    model_ = open_model(o);
    server::ServerOptions so;
    so.port = 0;
    so.api_key = s.api_key;
    so.max_body_bytes = s.max_body;
    so.model_name = s.model;
    so.http_threads = 48;
    http_ = std::make_unique<server::HttpServer>(so);
    http_->start();
    scheduler_ = std::make_unique<server::Scheduler>(model_, s.slots, model_.n_ctx);
    http_->attach(model_, *scheduler_);
  }
  ~TestServer() {
    http_->stop();
    http_->wait();
    scheduler_->stop();
  }
  int port() const { return http_->port(); }
  OpenedModel& model() { return model_; }
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port());
    c->set_read_timeout(120, 0);
    c->set_write_timeout(120, 0);
    return c;
  }

 private:
  OpenedModel model_;
  std::unique_ptr<server::HttpServer> http_;
  std::unique_ptr<server::Scheduler> scheduler_;
};

struct Reply {
  int status = 0;
  std::string body;
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

inline Reply post(httplib::Client& c, const std::string& path, const std::string& body,
                  const httplib::Headers& headers = {}) {
  auto r = c.Post(path, headers, body, "application/json");
  if (!r) return {-1, httplib::to_string(r.error())};
  return {r->status, r->body};
}

inline Reply post(httplib::Client& c, const std::string& path, const nlohmann::json& body) {
  return post(c, path, body.dump());
}

inline Reply get(httplib::Client& c, const std::string& path, const httplib::Headers& headers = {}) {
  auto r = c.Get(path, headers);
  if (!r) return {-1, httplib::to_string(r.error())};
  return {r->status, r->body};
}

// A streamed request: the "data:" payloads in order (the last one "[DONE]"). `keep_going` sees each event
// as it arrives and returns false to hang up.
inline int post_stream(httplib::Client& c, const std::string& path, const nlohmann::json& body,
                       std::vector<std::string>& events,
                       const std::function<bool(const std::string&)>& keep_going = nullptr) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buf;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t at;
    while ((at = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, at);
      buf.erase(0, at + 2);
      if (ev.rfind("data: ", 0) == 0) ev.erase(0, 6);
      events.push_back(ev);
      if (keep_going && !keep_going(ev)) return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!c.send(req, res, err)) return -1;
  return res.status;
}

// The text a stream carried: content (and reasoning_content) of every chunk, and the finish reason.
struct StreamText {
  std::string content, reasoning, finish_reason;
  nlohmann::json usage;
  bool done = false;
};

inline StreamText stream_text(const std::vector<std::string>& events, bool chat) {
  StreamText t;
  for (const auto& ev : events) {
    if (ev == "[DONE]") {
      t.done = true;
      continue;
    }
    auto j = nlohmann::json::parse(ev);
    if (j.contains("usage")) t.usage = j["usage"];
    if (!j.contains("choices") || j["choices"].empty()) continue;
    const auto& ch = j["choices"][0];
    if (!ch["finish_reason"].is_null()) t.finish_reason = ch["finish_reason"];
    if (chat) {
      const auto& d = ch["delta"];
      if (d.contains("content") && d["content"].is_string()) t.content += d["content"].get<std::string>();
      if (d.contains("reasoning_content")) t.reasoning += d["reasoning_content"].get<std::string>();
    } else {
      t.content += ch["text"].get<std::string>();
    }
  }
  return t;
}

}  // namespace df::testing

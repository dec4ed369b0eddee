#pragma once
// The HTTP side of `diskformer serve` (cpp-httplib): routes, API-key check, body limit, errors in OpenAI's
// shape, server-sent-event streams. It listens before the model is loaded (GET /health answers 503
// {"status": "loading"} until attach()), hands each generation to the Scheduler, and cancels a streamed
// request whose client went away.
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/chat_prompt.h"
#include "engine/model_source.h"
#include "engine/sampler.h"
#include "server/scheduler.h"

namespace httplib {
class Server;
}

namespace df::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (port() says which)
  std::string api_key;  // non-empty: every request but /health and the page needs "Authorization: Bearer KEY"
  size_t max_body_bytes = 4u << 20;  // larger bodies: 413
  int http_threads = 32;
  std::string model_name;         // what /v1/models lists
  SamplingParams defaults;        // the sampling flags
  bool fixed_seed = false;        // --seed given: every request without one uses it (else a random seed each)
  bool extract_reasoning = true;  // --reasoning-format none: false
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds (df::Error when the address is taken or invalid) and serves on a thread of its own.
  void start();
  int port() const { return port_; }
  // The model is loaded: generation endpoints answer from now on. Both must outlive the server (or stop()).
  void attach(OpenedModel& model, Scheduler& scheduler);
  // Stops listening and closes the connections (from any thread; wait() then returns).
  void stop();
  // Blocks until the server stopped (one thread only).
  void wait();

 private:
  void routes();
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> ready_{false};
  OpenedModel* model_ = nullptr;
  Scheduler* scheduler_ = nullptr;
  std::unique_ptr<ChatPromptBuilder> prompts_;
  std::string cache_description_;
  std::mutex prompt_mu_;  // template rendering and tokenizing, one request at a time
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace df::server

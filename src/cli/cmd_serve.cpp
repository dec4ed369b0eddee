// `diskformer serve`: the OpenAI-compatible HTTP server (src/server/). It listens first (GET /health says
// "loading" while the model opens), then runs -np slots on one scheduler thread until SIGINT or SIGTERM.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "server/http_server.h"
#include "server/scheduler.h"
#include "stream/byte_size.h"
#include "util/error.h"

namespace df::cli {
namespace {

struct ServeFlags {
  ModelFlags model;
  SamplingFlags sampling;
  std::string host = "127.0.0.1", api_key, reasoning_format = "auto", max_body = "4M", alias;
  int port = 8080, parallel = 1, http_threads = 0;
};

void serve(const ServeFlags& f) {
  if (f.parallel < 1 || f.parallel > 256) fail("-np {}: the number of slots must be in 1..256", f.parallel);
  server::ServerOptions o;
  o.host = f.host;
  o.port = f.port;
  o.api_key = f.api_key;
  o.max_body_bytes = stream::parse_byte_size(f.max_body, "--max-body");
  o.http_threads = f.http_threads > 0 ? f.http_threads : std::max(32, 4 * f.parallel);
  o.defaults = f.sampling.params;
  o.fixed_seed = f.sampling.seed.has_value();
  if (o.fixed_seed) o.defaults.seed = *f.sampling.seed;
  o.extract_reasoning = f.reasoning_format != "none";
  o.model_name =
      !f.alias.empty() ? f.alias : std::filesystem::path(f.model.display_name()).filename().string();

  // SIGINT and SIGTERM go to one thread that stops the server; every thread made from here on inherits the
  // mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  server::HttpServer http(o);
  http.start();
  fmt::print(stderr, "listening on http://{}:{}\n", o.host, http.port());
  std::fflush(stderr);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    http.stop();
  });
  struct Join {
    std::thread& t;
    ~Join() {
      pthread_kill(t.native_handle(), SIGTERM);  // wakes sigwait when the server stopped for another reason
      t.join();
    }
  } join{waiter};

  ModelFlags mf = f.model;
  mf.prompt_snapshot = true;  // every slot keeps the state at the end of its last prompt
  mf.n_sequences = f.parallel;
  OpenedModel m = open_from_flags(mf);
  server::Scheduler scheduler(m, f.parallel, m.n_ctx);
  http.attach(m, scheduler);
  fmt::print(stderr, "ready: {} slot{} of {} tokens, model '{}'\n", f.parallel, f.parallel == 1 ? "" : "s",
             m.n_ctx, o.model_name);
  std::fflush(stderr);
  http.wait();
  scheduler.stop();
  m.finish_recording();
}

}  // namespace

void register_serve(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat page at /)");
  flags->model.add(cmd);
  flags->sampling.add(cmd);
  cmd->add_option("--host", flags->host, "address to listen on (loopback unless told otherwise)")
      ->capture_default_str();
  cmd->add_option("--port", flags->port, "TCP port (0: any free one, printed on stderr)")
      ->capture_default_str();
  cmd->add_option("--parallel", flags->parallel, "-np N: slots (sequences decoded side by side)")
      ->capture_default_str();
  cmd->add_option("--api-key", flags->api_key, "require \"Authorization: Bearer KEY\" on every API request");
  cmd->add_option("--reasoning-format", flags->reasoning_format,
                  "auto: think blocks go to reasoning_content; none: keep them inline in content")
      ->check(CLI::IsMember({"auto", "deepseek", "none"}))
      ->capture_default_str();
  cmd->add_option("--max-body", flags->max_body, "largest request body (larger: 413), e.g. 4M")
      ->capture_default_str();
  cmd->add_option("--alias", flags->alias, "the model's name in /v1/models (default: the file's name)");
  cmd->add_option("--http-threads", flags->http_threads, "HTTP worker threads (default: max(32, 4 x -np))");
  cmd->callback([flags] { serve(*flags); });
}

}  // namespace df::cli

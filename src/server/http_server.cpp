#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "server/chat_page.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/responses.h"
#include "util/error.h"

namespace df::server {
namespace {

using nlohmann::json;

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  res.set_content(dump(j), "application/json; charset=utf-8");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, error_body(status, message));
}

// The routes and their methods, for 405 (a known path, another method) against 404.
const std::set<std::pair<std::string, std::string>>& known_routes() {
  static const std::set<std::pair<std::string, std::string>> r = {
      {"GET", "/"},
      {"GET", "/health"},
      {"GET", "/v1/health"},
      {"GET", "/v1/models"},
      {"GET", "/models"},
      {"GET", "/props"},
      {"GET", "/metrics"},
      {"POST", "/v1/chat/completions"},
      {"POST", "/chat/completions"},
      {"POST", "/v1/completions"},
      {"POST", "/completions"},
      {"POST", "/tokenize"},
      {"POST", "/detokenize"},
  };
  return r;
}

bool known_path(const std::string& path) {
  for (const auto& [m, p] : known_routes())
    if (p == path) return true;
  return false;
}

std::string allowed_methods(const std::string& path) {
  std::string s;
  for (const auto& [m, p] : known_routes())
    if (p == path) s += (s.empty() ? "" : ", ") + m;
  return s;
}

}  // namespace

HttpServer::HttpServer(ServerOptions options)
    : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  if (options_.http_threads < 1) fail("the HTTP thread count {} must be at least 1", options_.http_threads);
  const size_t threads = static_cast<size_t>(options_.http_threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_keep_alive_max_count(1000);
  routes();
}

HttpServer::~HttpServer() {
  stop();
  wait();
}

void HttpServer::start() {
  if (options_.port < 0 || options_.port > 65535)
    fail("--port {} is not a TCP port (0..65535)", options_.port);
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ <= 0) fail("cannot listen on {} (any port)", options_.host);
  } else {
    if (!http_->bind_to_port(options_.host, options_.port))
      fail("cannot listen on {}:{}: the address is in use or not this machine's", options_.host,
           options_.port);
    port_ = options_.port;
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
}

void HttpServer::attach(OpenedModel& model, Scheduler& scheduler) {
  model_ = &model;
  scheduler_ = &scheduler;
  prompts_ = std::make_unique<ChatPromptBuilder>(*model.tokenizer, model.chat_template);
  // Read here, before the scheduler's reads may change it (a fallback from O_DIRECT): /props shows this.
  cache_description_ = model.cache ? model.cache->describe() : std::string("resident");
  ready_.store(true);
}

void HttpServer::stop() {
  if (http_) http_->stop();
}

void HttpServer::wait() {
  if (thread_.joinable()) thread_.join();
}

void HttpServer::routes() {
  httplib::Server& s = *http_;

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path == "/" || req.path == "/health" || req.path == "/v1/health")
      return httplib::Server::HandlerResponse::Unhandled;
    std::string key = req.get_header_value("Authorization");
    if (key.rfind("Bearer ", 0) == 0) key.erase(0, 7);
    if (key.empty()) key = req.get_header_value("X-Api-Key");
    if (key == options_.api_key) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401,
               key.empty() ? "no API key: send \"Authorization: Bearer KEY\"" : "the API key is wrong");
    return httplib::Server::HandlerResponse::Handled;
  });

  // Statuses httplib sets itself (404, 413, 400 for a broken request line) get a JSON body; a known path
  // asked with another method is 405.
  s.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req,
                                                              httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if ((res.status == 404 || res.status == 400) && known_path(req.path) &&
        !known_routes().count({req.method, req.path})) {
      res.set_header("Allow", allowed_methods(req.path));
      send_error(res, 405,
                 fmt::format("{} does not take {}: use {}", req.path, req.method, allowed_methods(req.path)));
    } else if (res.status == 404) {
      send_error(res, 404, fmt::format("there is no {} {}", req.method, req.path));
    } else if (res.status == 413) {
      send_error(res, 413, "the request body is larger than the server takes");
    } else {
      send_error(res, res.status, fmt::format("the request was refused (HTTP {})", res.status));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));

  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e.status(), e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, fmt::format("internal error: {}", e.what()));
    } catch (...) {
      send_error(res, 500, "internal error");
    }
  });

  auto need_ready = [this] {
    if (!ready_.load()) throw ApiError(503, "the model is still loading");
  };

  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const std::string_view page = chat_page_html();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });

  auto health = [this](const httplib::Request&, httplib::Response& res) {
    if (ready_.load())
      send_json(res, 200, {{"status", "ok"}});
    else
      send_json(res, 503,
                {{"status", "loading"}, {"error", error_body(503, "the model is still loading")["error"]}});
  };
  s.Get("/health", health);
  s.Get("/v1/health", health);

  auto models = [this, need_ready](const httplib::Request&, httplib::Response& res) {
    need_ready();
    const auto& info = model_->model->info();
    json meta = {{"n_vocab", info.n_vocab},   {"n_ctx_train", info.n_ctx_train},
                 {"n_embd", info.n_embd},     {"n_layer", info.n_layer},
                 {"n_expert", info.n_expert}, {"n_expert_used", info.n_expert_used},
                 {"arch", info.arch}};
    json m = {{"id", options_.model_name},
              {"object", "model"},
              {"created", std::time(nullptr)},
              {"owned_by", "diskformer"},
              {"meta", meta}};
    send_json(res, 200, {{"object", "list"}, {"data", json::array({m})}});
  };
  s.Get("/v1/models", models);
  s.Get("/models", models);

  s.Get("/props", [this, need_ready](const httplib::Request&, httplib::Response& res) {
    need_ready();
    const auto& info = model_->model->info();
    const SamplingParams& d = options_.defaults;
    std::optional<stream::TelemetrySnapshot> cache;
    if (model_->cache) cache = model_->cache->telemetry();
    json props = {
        {"model_path", options_.model_name},
        {"total_slots", scheduler_->n_slots()},
        {"n_ctx", scheduler_->n_ctx()},
        {"chat_template", model_->chat_template.value_or("")},
        {"default_generation_settings",
         {{"n_ctx", scheduler_->n_ctx()},
          {"params",
           {{"temperature", d.temperature},
            {"top_k", d.top_k},
            {"top_p", d.top_p},
            {"min_p", d.min_p},
            {"repeat_penalty", d.repeat_penalty},
            {"repeat_last_n", d.repeat_last_n}}}}},
        {"model",
         {{"arch", info.arch},
          {"n_layer", info.n_layer},
          {"n_moe_layer", info.moe_layers.size()},
          {"n_expert", info.n_expert},
          {"n_expert_used", info.n_expert_used}}},
        {"expert_cache_description", cache_description_},
        {"stats", stats_json(scheduler_->counters(), scheduler_->n_slots(), cache)},
    };
    send_json(res, 200, props);
  });

  s.Get("/metrics", [this, need_ready](const httplib::Request&, httplib::Response& res) {
    need_ready();
    std::optional<stream::TelemetrySnapshot> cache;
    if (model_->cache) cache = model_->cache->telemetry();
    res.set_content(prometheus_text(scheduler_->counters(), scheduler_->n_slots(), cache),
                    "text/plain; version=0.0.4");
  });

  s.Post("/tokenize", [this, need_ready](const httplib::Request& req, httplib::Response& res) {
    need_ready();
    const json body = parse_body(req.body);
    auto it = body.find("content");
    if (it == body.end() || !it->is_string())
      bad_request("'content' must be the text to tokenize (a string)");
    bool add_special = false, with_pieces = false;
    if (auto a = body.find("add_special"); a != body.end()) {
      if (!a->is_boolean()) bad_request("'add_special' must be true or false");
      add_special = a->get<bool>();
    }
    if (auto w = body.find("with_pieces"); w != body.end()) {
      if (!w->is_boolean()) bad_request("'with_pieces' must be true or false");
      with_pieces = w->get<bool>();
    }
    const auto& tok = *model_->tokenizer;
    const auto ids = tok.encode(it->get<std::string>(), add_special, /*parse_special=*/true);
    json tokens = json::array();
    for (int32_t id : ids) {
      if (with_pieces)
        tokens.push_back({{"id", id}, {"piece", std::string(tok.token_to_piece(id, true))}});
      else
        tokens.push_back(id);
    }
    send_json(res, 200, {{"tokens", tokens}});
  });

  s.Post("/detokenize", [this, need_ready](const httplib::Request& req, httplib::Response& res) {
    need_ready();
    const json body = parse_body(req.body);
    auto it = body.find("tokens");
    if (it == body.end()) bad_request("'tokens' is missing: give a list of token ids");
    if (!it->is_array()) bad_request("'tokens' must be a list of token ids, not {}", it->type_name());
    const std::vector<int32_t> ids = parse_prompt(*it, *model_->tokenizer, "tokens");
    send_json(res, 200, {{"content", model_->tokenizer->decode(ids)}});
  });

  // Both generation endpoints: parse, queue, then answer whole or as a stream.
  auto generate = [this, need_ready](const httplib::Request& req, httplib::Response& res, bool chat) {
    need_ready();
    const json body = parse_body(req.body);
    ParseContext ctx{*model_->tokenizer, *prompts_, scheduler_->n_ctx(), options_.defaults,
                     options_.extract_reasoning};
    if (!options_.fixed_seed)
      ctx.defaults.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
    GenRequest r;
    {
      std::lock_guard lock(prompt_mu_);
      r = chat ? parse_chat_request(body, ctx) : parse_completion_request(body, ctx);
    }
    ResponseMeta meta;
    meta.id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_.fetch_add(1));
    meta.model = r.model.empty() ? options_.model_name : r.model;
    meta.created = static_cast<int64_t>(std::time(nullptr));
    const bool stream = r.stream, include_usage = r.include_usage, logprobs = r.logprobs;
    auto job = std::make_shared<Job>(std::move(r));
    scheduler_->submit(job);
    const tok::Tokenizer& tokenizer = *model_->tokenizer;

    if (!stream) {
      std::vector<Delta> deltas;
      while (!job->wait(std::chrono::milliseconds(200), deltas)) {
      }
      const Outcome& o = job->outcome();
      if (o.error_status) return send_error(res, o.error_status, o.error);
      send_json(res, 200,
                chat ? chat_completion(meta, deltas, o, logprobs, tokenizer)
                     : text_completion(meta, deltas, o, logprobs, tokenizer));
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto opened = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, meta, chat, include_usage, logprobs, opened, &tokenizer](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) {
            if (!sink.write(s.data(), s.size())) {
              job->cancel();  // the client went away
              return false;
            }
            return true;
          };
          if (!*opened) {
            *opened = true;
            if (chat && !write(sse(chat_chunk(meta, nullptr, false, tokenizer)))) return false;
          }
          std::vector<Delta> deltas;
          const bool done = job->wait(std::chrono::milliseconds(100), deltas);
          for (const Delta& d : deltas)
            if (!write(sse(chat ? chat_chunk(meta, &d, logprobs, tokenizer)
                                : text_chunk(meta, d, logprobs, tokenizer))))
              return false;
          if (!done) {
            if (deltas.empty() && !sink.is_writable()) {
              job->cancel();
              return false;
            }
            return true;
          }
          const Outcome& o = job->outcome();
          if (o.error_status) {
            write(sse(error_body(o.error_status, o.error)));
          } else {
            if (!write(sse(chat ? chat_final_chunk(meta, o) : text_final_chunk(meta, o)))) return false;
            if (include_usage &&
                !write(sse(usage_chunk(meta, chat ? "chat.completion.chunk" : "text_completion", o))))
              return false;
          }
          if (!write("data: [DONE]\n\n")) return false;
          sink.done();
          return true;
        },
        [job](bool) { job->cancel(); });  // a no-op once it finished; else the stream was cut short
  };
  s.Post("/v1/chat/completions",
         [generate](const httplib::Request& q, httplib::Response& r) { generate(q, r, true); });
  s.Post("/chat/completions",
         [generate](const httplib::Request& q, httplib::Response& r) { generate(q, r, true); });
  s.Post("/v1/completions",
         [generate](const httplib::Request& q, httplib::Response& r) { generate(q, r, false); });
  s.Post("/completions",
         [generate](const httplib::Request& q, httplib::Response& r) { generate(q, r, false); });
}

}  // namespace df::server

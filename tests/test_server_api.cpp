// `serve`'s API on a golden tiny model over loopback HTTP: every endpoint answers in OpenAI's (or
// llama.cpp's) shape, streamed and whole answers carry the same text, stop strings are never emitted, and
// each kind of bad input gets its status and an OpenAI-shaped error, with the server still serving after.
#include <gtest/gtest.h>

#include "server_fixture.h"

using df::testing::get;
using df::testing::post;
using df::testing::post_stream;
using df::testing::Reply;
using df::testing::ServerSetup;
using df::testing::stream_text;
using df::testing::TestServer;
using nlohmann::json;

namespace {

json chat_body(const std::string& text, int max_tokens) {
  return {{"messages", json::array({{{"role", "user"}, {"content", text}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

void expect_error(const Reply& r, int status, const std::string& fragment) {
  EXPECT_EQ(r.status, status) << r.body;
  json j = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  ASSERT_TRUE(j.contains("error")) << r.body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  EXPECT_EQ(j["error"]["code"], status);
  EXPECT_NE(j["error"]["message"].get<std::string>().find(fragment), std::string::npos) << r.body;
}

}  // namespace

TEST(ServerApi, HealthModelsPropsAndMetrics) {
  TestServer s;
  auto c = s.client();
  Reply h = get(*c, "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.json()["status"], "ok");
  Reply m = get(*c, "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(m.json()["object"], "list");
  EXPECT_EQ(m.json()["data"][0]["id"], "lfm2moe-tiny");
  Reply p = get(*c, "/props");
  ASSERT_EQ(p.status, 200);
  EXPECT_EQ(p.json()["total_slots"], 2);
  EXPECT_EQ(p.json()["n_ctx"], 512);
  EXPECT_FALSE(p.json()["chat_template"].get<std::string>().empty());
  ASSERT_EQ(post(*c, "/v1/chat/completions", chat_body("Hi", 4)).status, 200);
  Reply mt = get(*c, "/metrics");
  ASSERT_EQ(mt.status, 200);
  for (const char* name :
       {"diskformer_requests_total 1", "diskformer_tokens_generated_total", "diskformer_queue_depth 0",
        "diskformer_expert_cache_hit_rate", "diskformer_expert_bytes_per_token",
        "diskformer_expert_io_wait_share", "diskformer_expert_cache_layer_hit_rate{layer=\"0\"}",
        "diskformer_decode_tokens_per_second"})
    EXPECT_NE(mt.body.find(name), std::string::npos) << name;
  Reply page = get(*c, "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("/v1/chat/completions"), std::string::npos);
}

TEST(ServerApi, HealthSaysLoadingUntilTheModelIsAttached) {
  df::server::ServerOptions so;
  so.port = 0;
  df::server::HttpServer http(so);
  http.start();
  httplib::Client c("127.0.0.1", http.port());
  Reply h = get(c, "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_EQ(h.json()["status"], "loading");
  expect_error(post(c, "/v1/chat/completions", chat_body("Hi", 2)), 503, "loading");
}

TEST(ServerApi, ChatWholeAndStreamedCarryTheSameText) {
  TestServer s;
  auto c = s.client();
  json body = chat_body("Tell me a story", 24);
  Reply whole = post(*c, "/v1/chat/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.body;
  json j = whole.json();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string text = j["choices"][0]["message"]["content"];
  const int n = j["usage"]["completion_tokens"];
  EXPECT_GT(n, 0);
  EXPECT_LE(n, 24);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + n);
  EXPECT_EQ(j["timings"]["predicted_n"], n);
  EXPECT_TRUE(j["choices"][0]["finish_reason"] == "length" || j["choices"][0]["finish_reason"] == "stop");
  if (n < 24) {
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  }

  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  std::vector<std::string> events;
  ASSERT_EQ(post_stream(*c, "/v1/chat/completions", body, events), 200);
  auto t = stream_text(events, true);
  EXPECT_TRUE(t.done);
  EXPECT_EQ(t.content, text);
  EXPECT_EQ(t.finish_reason, j["choices"][0]["finish_reason"]);
  EXPECT_EQ(t.usage["completion_tokens"], n);
  EXPECT_EQ(json::parse(events.front())["choices"][0]["delta"]["role"], "assistant");
}

// A chat's next turn extends the previous turn's prompt: the slot resumes from its prompt snapshot instead
// of recomputing the history (even though the re-rendered reply need not tokenize as it was generated).
TEST(ServerApi, TheNextTurnOfAChatReusesTheSlotsState) {
  TestServer s;
  auto c = s.client();
  json body = chat_body("Tell me a story", 12);
  json first = post(*c, "/v1/chat/completions", body).json();
  const int first_prompt = first["usage"]["prompt_tokens"];
  body["messages"].push_back({{"role", "assistant"}, {"content", first["choices"][0]["message"]["content"]}});
  body["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
  json second = post(*c, "/v1/chat/completions", body).json();
  EXPECT_GE(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), first_prompt);
  EXPECT_EQ(second["timings"]["cache_n"], second["usage"]["prompt_tokens_details"]["cached_tokens"]);
  // The same answer as a fresh server that computes the whole history.
  TestServer fresh;
  auto c2 = fresh.client();
  json again = post(*c2, "/v1/chat/completions", body).json();
  EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(again["choices"][0]["message"]["content"], second["choices"][0]["message"]["content"]);
}

TEST(ServerApi, StopStringsAreNeverEmitted) {
  TestServer s;
  auto c = s.client();
  Reply free_run = post(
      *c, "/v1/completions",
      json{{"prompt", "Once upon a time"}, {"max_tokens", 32}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(free_run.status, 200);
  const std::string text = free_run.json()["choices"][0]["text"];
  ASSERT_GE(text.size(), 8u);
  const std::string stop = text.substr(text.size() / 2, 3);
  const std::string before = text.substr(0, text.find(stop));
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream);
    json body = {{"prompt", "Once upon a time"},
                 {"max_tokens", 32},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"stop", json::array({"never-there", stop})},
                 {"stream", stream}};
    if (!stream) {
      json j = post(*c, "/v1/completions", body).json();
      EXPECT_EQ(j["choices"][0]["text"], before);
      EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    } else {
      std::vector<std::string> events;
      ASSERT_EQ(post_stream(*c, "/v1/completions", body, events), 200);
      auto t = stream_text(events, false);
      EXPECT_EQ(t.content, before);
      EXPECT_EQ(t.finish_reason, "stop");
    }
  }
}

TEST(ServerApi, CompletionsTakeTextOrTokenIdsAndTokenizeRoundTrips) {
  TestServer s;
  auto c = s.client();
  Reply tk = post(*c, "/tokenize", json{{"content", "Once upon a time"}, {"add_special", true}});
  ASSERT_EQ(tk.status, 200);
  const std::vector<int32_t> ids = tk.json()["tokens"];
  ASSERT_FALSE(ids.empty());
  Reply dt = post(*c, "/detokenize", json{{"tokens", ids}});
  ASSERT_EQ(dt.status, 200);
  EXPECT_NE(dt.json()["content"].get<std::string>().find("Once upon a time"), std::string::npos);
  json a = post(*c, "/v1/completions",
                json{{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}})
               .json();
  json b = post(*c, "/v1/completions", json{{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}}).json();
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["usage"]["prompt_tokens"], static_cast<int>(ids.size()));
}

TEST(ServerApi, LogprobsAreLogSoftmaxAndTheChosenTokenIsTheBestAtTemperatureZero) {
  TestServer s;
  auto c = s.client();
  json body = chat_body("Hello", 6);
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  json j = post(*c, "/v1/chat/completions", body).json();
  const auto& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_FALSE(content.empty());
  for (const auto& e : content) {
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_EQ(e["top_logprobs"][0]["id"], e["id"]) << "greedy picks the most likely token";
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][1]["logprob"].get<double>());
  }
}

TEST(ServerApi, SeededSamplingRepeatsAndPenaltiesAreAccepted) {
  TestServer s;
  auto c = s.client();
  json body = chat_body("Hello there", 16);
  body["temperature"] = 0.9;
  body["top_k"] = 20;
  body["top_p"] = 0.9;
  body["min_p"] = 0.01;
  body["seed"] = 1234;
  body["presence_penalty"] = 0.5;
  body["frequency_penalty"] = 0.5;
  body["repeat_penalty"] = 1.1;
  json a = post(*c, "/v1/chat/completions", body).json();
  json b = post(*c, "/v1/chat/completions", body).json();
  EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
  body["max_completion_tokens"] = 3;
  body.erase("max_tokens");
  json d = post(*c, "/v1/chat/completions", body).json();
  EXPECT_LE(d["usage"]["completion_tokens"].get<int>(), 3);
}

TEST(ServerApi, BadInputGetsItsStatusAndAnOpenAiError) {
  ServerSetup setup;
  setup.max_body = 64 * 1024;
  setup.n_ctx = 128;
  TestServer s(setup);
  auto c = s.client();
  expect_error(post(*c, "/v1/chat/completions", std::string("{\"messages\": [")), 400, "not valid JSON");
  expect_error(post(*c, "/v1/chat/completions", std::string("[1, 2]")), 400, "must be a JSON object");
  expect_error(post(*c, "/v1/chat/completions", json{{"max_tokens", 3}}), 400, "'messages' is missing");
  expect_error(post(*c, "/v1/chat/completions", json{{"messages", "hi"}}), 400, "'messages' must be a list");
  expect_error(post(*c, "/v1/chat/completions",
                    json{{"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})}}),
               400, "role 'wizard' is unknown");
  json wrong = chat_body("x", 3);
  wrong["temperature"] = "hot";
  expect_error(post(*c, "/v1/chat/completions", wrong), 400, "'temperature' must be a number");
  wrong = chat_body("x", 3);
  wrong["max_tokens"] = 2.5;
  expect_error(post(*c, "/v1/chat/completions", wrong), 400, "'max_tokens' must be an integer");
  wrong = chat_body("x", 3);
  wrong["stop"] = json::object();
  expect_error(post(*c, "/v1/chat/completions", wrong), 400, "'stop' must be a string or a list");
  expect_error(post(*c, "/v1/completions", json{{"prompt", json::array({1, -4})}}), 400,
               "outside the vocabulary");
  std::string long_text;
  for (int i = 0; i < 200; ++i) long_text += "word ";
  expect_error(post(*c, "/v1/chat/completions", chat_body(long_text, 3)), 400, "context holds 128");
  expect_error(post(*c, "/v1/completions", std::string(100 * 1024, ' ')), 413,
               "larger than the server takes");
  expect_error(get(*c, "/v2/nothing"), 404, "there is no GET /v2/nothing");
  expect_error(post(*c, "/health", std::string("{}")), 405, "does not take POST");
  expect_error(get(*c, "/v1/chat/completions"), 405, "use POST");
  EXPECT_EQ(post(*c, "/v1/chat/completions", chat_body("still serving", 3)).status, 200);
  EXPECT_EQ(get(*c, "/health").status, 200);
}

TEST(ServerApi, AnApiKeyIsRequiredWhenSet) {
  ServerSetup setup;
  setup.api_key = "sekrit";
  TestServer s(setup);
  auto c = s.client();
  expect_error(post(*c, "/v1/chat/completions", chat_body("x", 2)), 401, "no API key");
  expect_error(
      post(*c, "/v1/chat/completions", chat_body("x", 2).dump(), {{"Authorization", "Bearer wrong"}}), 401,
      "wrong");
  expect_error(get(*c, "/v1/models", {{"Authorization", "Bearer wrong"}}), 401, "wrong");
  EXPECT_EQ(
      post(*c, "/v1/chat/completions", chat_body("x", 2).dump(), {{"Authorization", "Bearer sekrit"}}).status,
      200);
  EXPECT_EQ(get(*c, "/health").status, 200) << "health needs no key";
}

// An expert read that fails mid-request answers that request 500; the slot's state is reset and the next
// request computes exactly what a server without the fault computes.
TEST(ServerApi, AnExpertReadErrorFailsOnlyThatRequest) {
  const json body = chat_body("Tell me about disks", 10);
  std::string want;
  {
    TestServer clean;
    auto c = clean.client();
    want = post(*c, "/v1/chat/completions", body).json()["choices"][0]["message"]["content"];
  }
  ServerSetup setup;
  setup.eio_on_read = 2;
  setup.slots = 1;
  TestServer s(setup);
  auto c = s.client();
  expect_error(post(*c, "/v1/chat/completions", body), 500, "Input/output error");
  EXPECT_EQ(get(*c, "/health").status, 200);
  Reply again = post(*c, "/v1/chat/completions", body);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.json()["choices"][0]["message"]["content"], want);
  EXPECT_EQ(again.json()["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
      << "the failed state was reset";
  EXPECT_NE(get(*c, "/metrics").body.find("diskformer_requests_failed_total 1"), std::string::npos);
}

TEST(ServerApi, LegacyCompletionLogprobsAndReasoningFormatAreChecked) {
  TestServer s;
  auto c = s.client();
  json j = post(*c, "/v1/completions",
                json{{"prompt", "Hello"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 2}})
               .json();
  const auto& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), lp["token_logprobs"].size());
  ASSERT_FALSE(lp["tokens"].empty());
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  json body = chat_body("x", 2);
  body["reasoning_format"] = "sideways";
  expect_error(post(*c, "/v1/chat/completions", body), 400, "'reasoning_format' 'sideways' is unknown");
  body["reasoning_format"] = "none";
  EXPECT_EQ(post(*c, "/v1/chat/completions", body).status, 200);
}

// `serve` under load and abuse: 16 concurrent clients x 8 requests (mixed streaming, varied lengths) are all
// answered and their temperature-0 outputs equal those of the same requests run one at a time; a client
// that hangs up mid-stream frees its slot; 200 random malformed bodies are answered 4xx and the server keeps
// serving.
#include <gtest/gtest.h>

#include <random>
#include <thread>

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

constexpr int kPrompts = 16;

json request_for(int i, bool stream) {
  const char* words[] = {"disk", "expert", "cache", "token", "river", "stone", "light", "paper"};
  std::string text = "Tell me about";
  for (int k = 0; k <= i % 5; ++k) text += std::string(" ") + words[(i * 3 + k) % 8];
  json body = {{"max_tokens", 4 + (i * 7) % 21}, {"temperature", 0}, {"stream", stream}};
  if (i % 3 == 0) {
    body["prompt"] = text;
  } else {
    body["messages"] = json::array({{{"role", "user"}, {"content", text}}});
  }
  return body;
}

const char* path_for(int i) { return i % 3 == 0 ? "/v1/completions" : "/v1/chat/completions"; }

std::string answer(httplib::Client& c, int i, bool stream) {
  const json body = request_for(i, stream);
  const bool chat = i % 3 != 0;
  if (stream) {
    std::vector<std::string> events;
    if (post_stream(c, path_for(i), body, events) != 200) return "<failed stream>";
    auto t = stream_text(events, chat);
    return t.done ? t.content + "|" + t.finish_reason : "<no [DONE]>";
  }
  Reply r = post(c, path_for(i), body);
  // A failure says what failed (for a client-side error, httplib's name of it: Connection, Read, ...).
  if (r.status != 200) return "<status " + std::to_string(r.status) + ": " + r.body.substr(0, 200) + ">";
  const json j = r.json();
  const auto& ch = j["choices"][0];
  return (chat ? ch["message"]["content"].get<std::string>() : ch["text"].get<std::string>()) + "|" +
         ch["finish_reason"].get<std::string>();
}

double metric(httplib::Client& c, const std::string& name) {
  const std::string body = get(c, "/metrics").body;
  const std::string key = "\n" + name + " ";
  const size_t at = body.find(key);
  return at == std::string::npos ? -1 : std::stod(body.substr(at + key.size()));
}

}  // namespace

TEST(ServerLoad, SixteenClientsGetTheSequentialAnswers) {
  ServerSetup setup;
  setup.slots = 4;
  TestServer s(setup);
  std::vector<std::string> want(kPrompts);
  {
    ServerSetup one;
    one.slots = 1;
    TestServer alone(one);
    auto c = alone.client();
    for (int i = 0; i < kPrompts; ++i) want[static_cast<size_t>(i)] = answer(*c, i, false);
  }
  constexpr int kClients = 16, kRequests = 8;
  std::vector<std::vector<std::string>> got(kClients);
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t)
    threads.emplace_back([&, t] {
      auto c = s.client();
      for (int k = 0; k < kRequests; ++k)
        got[static_cast<size_t>(t)].push_back(
            answer(*c, (t * kRequests + k * 5) % kPrompts, (t + k) % 2 == 0));
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kClients; ++t)
    for (int k = 0; k < kRequests; ++k) {
      const int i = (t * kRequests + k * 5) % kPrompts;
      EXPECT_EQ(got[static_cast<size_t>(t)][static_cast<size_t>(k)], want[static_cast<size_t>(i)])
          << "client " << t << " request " << k << " (prompt " << i << ")";
    }
  auto c = s.client();
  EXPECT_EQ(metric(*c, "diskformer_requests_total"), kClients * kRequests);
  EXPECT_EQ(metric(*c, "diskformer_requests_failed_total"), 0);
  EXPECT_EQ(metric(*c, "diskformer_queue_depth"), 0);
  // The slots decoded side by side in shared forwards (so the answers above are also those of batched
  // decoding): some forward carried several sequences, none more than the 4 slots.
  const double forwards = metric(*c, "diskformer_decode_forwards_total");
  const double sequences = metric(*c, "diskformer_decode_sequences_total");
  EXPECT_GT(sequences, forwards);
  EXPECT_LE(sequences, 4 * forwards);
  // New requests' prompts ran beside the others' decode steps.
  EXPECT_GT(metric(*c, "diskformer_mixed_forwards_total"), 0);
}

// One slot; a stream that would run to the end of a long context is cut off by its client after a few
// chunks: the scheduler stops that sequence (counted as cancelled, far short of its length) and the slot
// answers the next request.
TEST(ServerLoad, AClientThatHangsUpFreesItsSlot) {
  ServerSetup setup;
  setup.slots = 1;
  setup.n_ctx = 4096;
  TestServer s(setup);
  auto c = s.client();
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 4000},
                     {"ignore_eos", true},
                     {"temperature", 0},
                     {"stream", true}};
  std::vector<std::string> events;
  int seen = 0;
  post_stream(*c, "/v1/completions", body, events, [&](const std::string&) { return ++seen < 3; });
  EXPECT_EQ(seen, 3);
  auto c2 = s.client();
  Reply next = post(*c2, "/v1/completions", json{{"prompt", "Hello"}, {"max_tokens", 3}, {"temperature", 0}});
  EXPECT_EQ(next.status, 200) << next.body;
  EXPECT_EQ(metric(*c2, "diskformer_requests_cancelled_total"), 1);
  EXPECT_LT(metric(*c2, "diskformer_tokens_generated_total"), 4000) << "the cut-off sequence did not run on";
  EXPECT_EQ(metric(*c2, "diskformer_slots_busy"), 0);
}

TEST(ServerLoad, TwoHundredMalformedBodiesAre4xxAndTheServerLives) {
  TestServer s;
  auto c = s.client();
  std::mt19937 rng(12345);
  const std::vector<std::string> valid = {
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})",
      R"({"prompt":"hello","max_tokens":2})",
  };
  // Valid JSON with one wrong field: each of these is out of type or range.
  const std::vector<std::pair<std::string, json>> bad_fields = {{"temperature", "hot"},
                                                                {"temperature", -1},
                                                                {"temperature", json::array()},
                                                                {"max_tokens", -5},
                                                                {"max_tokens", 2.5},
                                                                {"max_tokens", "ten"},
                                                                {"stop", 5},
                                                                {"stop", json::object()},
                                                                {"stop", json::array({1, "a"})},
                                                                {"top_k", "many"},
                                                                {"top_k", -3},
                                                                {"top_p", 0},
                                                                {"top_p", 1.5},
                                                                {"min_p", -1},
                                                                {"seed", "x"},
                                                                {"stream", "yes"},
                                                                {"stream", 1},
                                                                {"logprobs", "yes"},
                                                                {"top_logprobs", 50},
                                                                {"n", 3},
                                                                {"stream_options", "yes"},
                                                                {"presence_penalty", 9},
                                                                {"frequency_penalty", "a"},
                                                                {"repeat_penalty", 0},
                                                                {"model", 7},
                                                                {"max_tokens", 1e300},
                                                                {"max_tokens", 1e19},
                                                                {"top_k", 18446744073709551615ull},
                                                                {"seed", 1.5},
                                                                {"temperature", 1e300}};
  for (int i = 0; i < 200; ++i) {
    const std::string& base = valid[static_cast<size_t>(rng() % valid.size())];
    const bool chat = base.find("messages") != std::string::npos;
    std::string body;
    switch (rng() % 4) {
      case 0:
        body = base.substr(0, rng() % (base.size() - 1));
        break;   // cut short
      case 1: {  // random bytes
        body.resize(1 + rng() % 64);
        for (char& ch : body) ch = static_cast<char>(rng() % 256);
        break;
      }
      case 2: {  // one byte flipped to a JSON-breaking one
        body = base;
        body[rng() % body.size()] = "{}[]\",:\\"[rng() % 8];
        if (json::accept(body)) body += "}";
        break;
      }
      default: {  // valid JSON, a wrong value
        json j = json::parse(base);
        switch (rng() % 6) {
          case 0:
            if (chat) {
              const json role_bad = json::array({{{"role", "nobody"}, {"content", "x"}}});
              const json content_bad = json::array({{{"role", "user"}, {"content", 5}}});
              const std::vector<json> bad_messages = {"hi",
                                                      5,
                                                      json::array(),
                                                      json::object(),
                                                      role_bad,
                                                      content_bad,
                                                      json::array({json::array()})};
              j["messages"] = bad_messages[rng() % bad_messages.size()];
            } else {
              const std::vector<json> bad_prompts = {
                  5, json::object(), json::array({-1}), json::array({1.5}), json::array({"a", "b"}), nullptr};
              j["prompt"] = bad_prompts[rng() % bad_prompts.size()];
            }
            break;
          default: {
            const auto& [f, v] = bad_fields[rng() % bad_fields.size()];
            j[f] = v;
          }
        }
        body = j.dump();
      }
    }
    Reply r = post(*c, chat ? "/v1/chat/completions" : "/v1/completions", body);
    EXPECT_GE(r.status, 400) << body;
    EXPECT_LT(r.status, 500) << body << " -> " << r.body;
    EXPECT_TRUE(json::parse(r.body, nullptr, false).contains("error")) << body << " -> " << r.body;
  }
  EXPECT_EQ(get(*c, "/health").status, 200);
  EXPECT_EQ(post(*c, "/v1/chat/completions", valid[0]).status, 200);
}

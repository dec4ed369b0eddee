// hub::download_file and the listing fetch against the loopback hub (tests/scripts/hf_test_server.py): the
// bytes arrive identical, a .part resumes where it stopped, every fault of the network or the server ends as
// the design says (resumed, restarted, retried, refused with a message).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "error_matchers.h"
#include "hub/download.h"
#include "hub/hf_api.h"
#include "hub/sha256.h"
#include "hub_test_server.h"
#include "test_store_util.h"

using namespace df;
using namespace df::hub;
using namespace df::testing;

namespace {

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

const std::string kCommit = "c0ffee0000000000000000000000000000000001";
const std::string kRepo = "test-org/tiny-GGUF";
const std::string kFile = "tiny-Q4_0.gguf";

std::string sha_of(const std::vector<uint8_t>& b) {
  Sha256 s;
  s.update(b.data(), b.size());
  return s.hex();
}

struct DownloadTest : ::testing::Test {
  std::string dir = scratch_dir();
  HubTestServer server{dir};
  std::string source = golden("qwen3moe-tiny.gguf");
  std::vector<uint8_t> bytes = slurp(source);
  std::string target = dir + "/" + kFile;
  std::vector<std::string> notes;

  void serve(nlohmann::json faults = nlohmann::json::object()) {
    nlohmann::json cfg{{"repos", {{kRepo, hub_repo(kCommit, {{kFile, source}})}}}, {"faults", faults}};
    server.configure(cfg);
  }
  RequestContext ctx(bool has_token = false) {
    return RequestContext{kRepo, "main", kFile, file_url(server.endpoint(), kRepo, kCommit, kFile),
                          has_token};
  }
  DownloadOptions options(const std::atomic<bool>* cancel = nullptr) {
    DownloadOptions o;
    o.retry.base_ms = 1;
    o.retry.max_attempts = 4;
    o.on_message = [this](const std::string& s) { notes.push_back(s); };
    o.cancel = cancel;
    return o;
  }
  ExpectedFile expected() const { return ExpectedFile{bytes.size(), sha_of(bytes)}; }
  void download(const std::string& token = "", const std::atomic<bool>* cancel = nullptr) {
    HttpOptions ho;
    ho.token = token;
    ho.cancel = cancel;
    HttpClient http(ho);
    download_file(http, ctx(!token.empty()), target, expected(), options(cancel));
  }
  std::string download_error(const std::string& token = "") {
    try {
      download(token);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  void write_part(size_t n) {
    write_file(part_path_of(target),
               std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(n)));
  }
  bool exists(const std::string& p) { return std::filesystem::exists(p); }
};

}  // namespace

TEST_F(DownloadTest, WholeFileArrivesIdenticalAndThePartIsGone) {
  serve();
  download();
  EXPECT_EQ(slurp(target), bytes);
  EXPECT_FALSE(exists(part_path_of(target)));
  const auto reqs = server.requests_to("/resolve/");
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_TRUE(reqs[0]["range"].is_null());
  EXPECT_EQ(reqs[0]["path"], "/" + kRepo + "/resolve/" + kCommit + "/" + kFile);
}

TEST_F(DownloadTest, FollowsTheRedirectToTheBlobStore) {
  serve({{"redirect", true}});
  download();
  EXPECT_EQ(slurp(target), bytes);
  EXPECT_EQ(server.requests_to("/_blob/").size(), 1u);
}

TEST_F(DownloadTest, ConnectionsCutAtSeveralOffsetsResumeToTheSameBytes) {
  const std::vector<uint64_t> cuts = {1, 4096, 1000003, bytes.size() / 2, bytes.size() - 1};
  serve({{"drop_at", cuts}, {"redirect", true}});
  download();
  EXPECT_EQ(slurp(target), bytes);
  std::vector<std::string> ranges;
  for (const auto& r : server.requests_to("/_blob/"))
    ranges.push_back(r["range"].is_null() ? "" : r["range"].get<std::string>());
  std::vector<std::string> want = {""};
  for (uint64_t c : cuts) want.push_back("bytes=" + std::to_string(c) + "-");
  EXPECT_EQ(ranges, want);
}

TEST_F(DownloadTest, APartFromAnEarlierRunIsContinuedWithRange) {
  serve();
  for (size_t n : {size_t{1}, size_t{65536}, bytes.size() / 3, bytes.size() - 1}) {
    SCOPED_TRACE(n);
    std::filesystem::remove(target);
    server.clear_log();
    write_part(n);
    download();
    EXPECT_EQ(slurp(target), bytes);
    const auto reqs = server.requests_to("/resolve/");
    ASSERT_EQ(reqs.size(), 1u);
    EXPECT_EQ(reqs[0]["range"], "bytes=" + std::to_string(n) + "-");
    EXPECT_EQ(reqs[0]["status"], 206);
  }
}

TEST_F(DownloadTest, AServerThatIgnoresRangeIsFollowedFromByteZero) {
  serve({{"ignore_range", true}});
  write_part(bytes.size() / 2);
  download();
  EXPECT_EQ(slurp(target), bytes);
  ASSERT_EQ(server.requests_to("/resolve/").size(), 1u);
  EXPECT_EQ(server.requests_to("/resolve/")[0]["status"], 200);
  ASSERT_FALSE(notes.empty());
  EXPECT_HAS(notes.back(), "ignored the request to resume");
}

TEST_F(DownloadTest, IgnoredRangeAndDroppedConnectionsStillEndIdentical) {
  serve({{"ignore_range", true}, {"drop_at", {100000, 2000000}}});
  download();
  EXPECT_EQ(slurp(target), bytes);
  EXPECT_EQ(server.requests_to("/resolve/").size(), 3u);
}

TEST_F(DownloadTest, APartLongerThanTheFileStartsOver) {
  serve();
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  write_file(part_path_of(target), longer);
  download();
  EXPECT_EQ(slurp(target), bytes);
}

TEST_F(DownloadTest, WrongSha256RemovesThePartAndRefuses) {
  serve();
  HttpClient http(HttpOptions{});
  ExpectedFile wrong = expected();
  wrong.sha256 = std::string(64, '0');
  const std::string msg =
      expect_error([&] { download_file(http, ctx(), target, wrong, options()); },
                   {"sha256 mismatch", kFile, std::string(64, '0'), expected().sha256, "removed"});
  EXPECT_FALSE(exists(target));
  EXPECT_FALSE(exists(part_path_of(target)));
}

TEST_F(DownloadTest, ServerErrorsAreRetriedThenItWorks) {
  serve({{"fail_5xx", 3}});
  download();
  EXPECT_EQ(slurp(target), bytes);
  EXPECT_EQ(server.requests_to("/resolve/").size(), 4u);
}

TEST_F(DownloadTest, ServerErrorsWithoutEndGiveUpAfterTheBoundedAttempts) {
  serve({{"fail_5xx", 1000}});
  EXPECT_HAS(download_error(), "HTTP 503 after 4 attempts");
  EXPECT_EQ(server.requests_to("/resolve/").size(), 4u);
}

TEST_F(DownloadTest, MissingFileSaysNoSuchFile) {
  serve();
  HttpClient http(HttpOptions{});
  RequestContext c = ctx();
  c.file = "nope.gguf";
  c.url = file_url(server.endpoint(), kRepo, kCommit, "nope.gguf");
  expect_error([&] { download_file(http, c, dir + "/nope.gguf", expected(), options()); },
               {"no such file", "nope.gguf", "404"});
  EXPECT_FALSE(exists(dir + "/nope.gguf"));
}

TEST_F(DownloadTest, AnEndlessRefusalIsCutShortAndStillExplained) {
  serve({{"error_padding", 50 << 20}});
  HttpClient http(HttpOptions{});
  RequestContext c = ctx();
  c.file = "nope.gguf";
  c.url = file_url(server.endpoint(), kRepo, kCommit, "nope.gguf");
  expect_error([&] { download_file(http, c, dir + "/nope.gguf", expected(), options()); },
               {"no such file", "nope.gguf", "404"});
}

TEST_F(DownloadTest, HostileListingsAreRefused) {
  HttpClient http(HttpOptions{});
  const RetryPolicy fast{2, 1};
  for (
      const auto& [body, says] : std::vector<std::pair<std::string, std::string>>{
          {"<html>", "not JSON"},
          {R"({"sha": "c0ffee0000000000000000000000000000000001", "siblings": [{"rfilename": "../x.gguf"}]})",
           "unsafe file"},
          {R"({"sha": "c0ffee0000000000000000000000000000000001", "siblings": [{"rfilename": "a.gguf",
               "lfs": {"sha256": "zz", "size": 1}}]})",
           "LFS sha256"}}) {
    serve({{"listing_body", body}});
    expect_error([&] { fetch_listing(http, server.endpoint(), kRepo, "main", false, fast, nullptr); },
                 {says});
  }
}

TEST_F(DownloadTest, UnauthorizedSaysItNeedsOrRefusedTheToken) {
  serve({{"require_token", "hf_good"}, {"forbidden_token", "hf_other"}});
  EXPECT_HAS(download_error(), "needs a token: set HF_TOKEN");
  EXPECT_HAS(download_error("hf_bad"), "refused HF_TOKEN (401");
  EXPECT_HAS(download_error("hf_other"), "403 Forbidden");
  download("hf_good");
  EXPECT_EQ(slurp(target), bytes);
  EXPECT_EQ(server.requests_to("/resolve/").back()["auth"], "Bearer hf_good");
}

TEST_F(DownloadTest, CancelKeepsThePartAndResumesLater) {
  serve({{"slow_bps", 2000000}});
  std::atomic<bool> cancel{false};
  std::thread stopper([&] {
    for (int i = 0; i < 500 && !(exists(part_path_of(target)) &&
                                 std::filesystem::file_size(part_path_of(target)) > 200000);
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    cancel = true;
  });
  std::string msg;
  try {
    download("", &cancel);
  } catch (const Interrupted& e) {
    msg = e.what();
  }
  stopper.join();
  EXPECT_HAS(msg, "interrupted");
  EXPECT_HAS(msg, "run the same command again to resume");
  ASSERT_TRUE(exists(part_path_of(target)));
  const uint64_t kept = std::filesystem::file_size(part_path_of(target));
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, bytes.size());
  serve();
  server.clear_log();
  download();
  EXPECT_EQ(slurp(target), bytes);
  EXPECT_EQ(server.requests_to("/resolve/").at(0)["range"], "bytes=" + std::to_string(kept) + "-");
}

TEST_F(DownloadTest, ListingFetchRetriesAndExplainsMissingRepos) {
  serve({{"fail_5xx", 2}});
  HttpClient http(HttpOptions{});
  RetryPolicy fast{4, 1};
  const RepoListing l = fetch_listing(http, server.endpoint(), kRepo, "main", false, fast, nullptr);
  EXPECT_EQ(l.commit, kCommit);
  ASSERT_NE(l.find(kFile), nullptr);
  EXPECT_EQ(l.find(kFile)->sha256, expected().sha256);
  EXPECT_EQ(l.find(kFile)->size, bytes.size());
  expect_error(
      [&] { fetch_listing(http, server.endpoint(), "test-org/nothing", "main", false, fast, nullptr); },
      {"no such model or revision", "test-org/nothing", "404"});
  expect_error([&] { fetch_listing(http, server.endpoint(), kRepo, "v9", false, fast, nullptr); },
               {"no such model or revision", "'v9'"});
  EXPECT_EQ(server.requests_to("/api/models/").back()["path"],
            "/api/models/" + kRepo + "/revision/v9?blobs=true");
}

TEST_F(DownloadTest, NothingListeningIsRetriedThenReported) {
  HttpClient http(HttpOptions{});
  RetryPolicy fast{3, 1};
  expect_error([&] { fetch_listing(http, "http://127.0.0.1:1", kRepo, "main", false, fast, nullptr); },
               {"cannot get", "gave up after 3 attempts"});
}

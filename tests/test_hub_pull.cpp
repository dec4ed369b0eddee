// hub::pull and hub::resolve_hf end to end against the loopback hub: a repository and quant tag become a
// complete expert store of the verified bytes, the GGUF goes (or stays with keep_gguf), a second pull or -hf
// needs no download, bad sha256 and full disks stop before anything is ingested, and list / rm see the
// result.
#include <gtest/gtest.h>

#include <filesystem>

#include "error_matchers.h"
#include "hub/download.h"
#include "hub/local_models.h"
#include "hub/pull.h"
#include "hub/sha256.h"
#include "hub_test_server.h"
#include "test_store_util.h"

using namespace df;
using namespace df::hub;
using namespace df::testing;

namespace {

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

const std::string kCommit = "c0ffee0000000000000000000000000000000002";
const std::string kRepo = "test-org/LFM2-tiny-GGUF";

std::string sha_of_file(const std::string& path) {
  const auto b = slurp(path);
  Sha256 s;
  s.update(b.data(), b.size());
  return s.hex();
}

struct PullTest : ::testing::Test {
  std::string dir = scratch_dir();
  std::string cache = dir + "/cache";
  HubTestServer server{dir};
  std::vector<std::string> notes;

  void serve(nlohmann::json faults = nlohmann::json::object(),
             nlohmann::json file_overrides = nlohmann::json::object()) {
    nlohmann::json repo = hub_repo(kCommit, {{"LFM2-tiny-Q4_0.gguf", golden("lfm2moe-tiny.gguf")},
                                             {"LFM2-tiny-F16.gguf", golden("lfm2moe-tiny-f16.gguf")},
                                             {"LFM2-tiny-imat-F16.gguf", golden("lfm2moe-tiny-f16.gguf")}});
    for (auto& [name, o] : file_overrides.items()) repo["files"][name].update(o);
    server.configure({{"repos", {{kRepo, repo}}}, {"faults", faults}});
  }
  PullOptions options() {
    PullOptions o;
    o.endpoint = server.endpoint();
    o.cache_root = cache;
    o.retry.base_ms = 1;
    o.on_message = [this](const std::string& s) { notes.push_back(s); };
    return o;
  }
  std::string entry() { return cache + "/models/test-org--LFM2-tiny-GGUF--LFM2-tiny-Q4_0"; }
  bool exists(const std::string& p) { return std::filesystem::exists(p); }
};

}  // namespace

TEST_F(PullTest, RepoAndQuantBecomeACompleteStoreOfTheVerifiedFile) {
  serve();
  const PullResult r = pull(parse_model_ref(kRepo + ":q4_0"), options());
  EXPECT_EQ(r.dir, entry());
  EXPECT_FALSE(r.already_there);
  const store::Store s = store::Store::open(r.dir);
  EXPECT_EQ(s.source().sha256, sha_of_file(golden("lfm2moe-tiny.gguf")));
  EXPECT_EQ(s.source().name, "LFM2-tiny-Q4_0.gguf");
  EXPECT_GT(s.verify(false), 0u);                        // every record and dense tensor checks out
  EXPECT_FALSE(exists(r.dir + "/LFM2-tiny-Q4_0.gguf"));  // deleted after the ingest
  EXPECT_FALSE(exists(r.dir + "/LFM2-tiny-Q4_0.gguf.part"));
  const auto rec = read_record(r.dir);
  ASSERT_TRUE(rec);
  EXPECT_TRUE(rec->complete);
  EXPECT_FALSE(rec->gguf_kept);
  EXPECT_EQ(rec->commit, kCommit);
  EXPECT_EQ(rec->revision, "main");
  EXPECT_EQ(rec->file, "LFM2-tiny-Q4_0.gguf");
  EXPECT_EQ(rec->sha256, s.source().sha256);
  // The sha256 verified while downloading is the store's: the ingest did not hash the file again.
  for (const auto& n : notes) EXPECT_EQ(n.find("hashing"), std::string::npos) << n;

  server.clear_log();
  const PullResult again = pull(parse_model_ref(kRepo + ":Q4_0"), options());
  EXPECT_TRUE(again.already_there);
  EXPECT_TRUE(server.requests_to("/resolve/").empty());
}

TEST_F(PullTest, KeepGgufKeepsTheByteIdenticalFile) {
  serve();
  PullOptions o = options();
  o.keep_gguf = true;
  o.output_dir = dir + "/mine";
  const PullResult r = pull(parse_model_ref(kRepo + "/LFM2-tiny-F16.gguf"), o);
  EXPECT_EQ(r.dir, dir + "/mine");
  EXPECT_EQ(r.gguf_path, dir + "/mine/LFM2-tiny-F16.gguf");
  EXPECT_EQ(slurp(r.gguf_path), slurp(golden("lfm2moe-tiny-f16.gguf")));
  EXPECT_NO_THROW(store::Store::open(r.dir));
  EXPECT_TRUE(read_record(r.dir)->gguf_kept);
}

TEST_F(PullTest, NeverOverwritesAStoreItDidNotMake) {
  serve();
  store::IngestOptions io;
  io.cache_root = cache;
  io.output_dir = dir + "/other";
  store::ingest(golden("qwen3moe-tiny.gguf"), io);
  PullOptions o = options();
  o.output_dir = dir + "/other";
  expect_error([&] { pull(parse_model_ref(kRepo + ":Q4_0"), o); },
               {"holds the expert store of another model"});
  EXPECT_EQ(store::Store::open(dir + "/other").source().name, "qwen3moe-tiny.gguf");
  EXPECT_TRUE(server.requests_to("/resolve/").empty());
}

TEST_F(PullTest, SeveralMatchingFilesAreListedAndNothingIsWritten) {
  serve();
  expect_error([&] { pull(parse_model_ref(kRepo + ":F16"), options()); },
               {"2 GGUF files match the quant tag 'F16'", "LFM2-tiny-F16.gguf", "LFM2-tiny-imat-F16.gguf",
                kRepo + "/FILE"});
  EXPECT_FALSE(exists(cache + "/models"));
}

TEST_F(PullTest, WrongSha256IsRefusedRemovedAndNeverIngested) {
  serve({}, {{"LFM2-tiny-Q4_0.gguf", {{"sha256", std::string(64, 'e')}}}});
  expect_error([&] { pull(parse_model_ref(kRepo + ":Q4_0"), options()); },
               {"sha256 mismatch", std::string(64, 'e'), "nothing was ingested"});
  EXPECT_FALSE(exists(entry() + "/LFM2-tiny-Q4_0.gguf"));
  EXPECT_FALSE(exists(entry() + "/LFM2-tiny-Q4_0.gguf.part"));
  EXPECT_FALSE(exists(entry() + "/manifest.json"));
  EXPECT_FALSE(exists(entry() + "/experts.bin.partial"));
  EXPECT_FALSE(read_record(entry())->complete);
}

TEST_F(PullTest, AFullDiskStopsBeforeTheFirstByteAndSaysHowMuch) {
  serve();
  PullOptions o = options();
  o.free_bytes_for_test = 1000000;
  const std::string msg = expect_error(
      [&] { pull(parse_model_ref(kRepo + ":Q4_0"), o); },
      {"not enough disk space", entry(), "still to download", "expert store", "976.6 KiB free", "-o"});
  EXPECT_TRUE(server.requests_to("/resolve/").empty());
  EXPECT_FALSE(exists(entry() + "/LFM2-tiny-Q4_0.gguf.part"));
}

TEST_F(PullTest, AListedSizeBeyondTheRealFreeSpaceIsRefusedToo) {
  serve({}, {{"LFM2-tiny-Q4_0.gguf", {{"size", 200ull << 40}}}});  // 200 TiB: more than any test machine has
  expect_error([&] { pull(parse_model_ref(kRepo + ":Q4_0"), options()); },
               {"not enough disk space", "200.0 TiB still to download"});
  EXPECT_TRUE(server.requests_to("/resolve/").empty());
}

TEST_F(PullTest, AnInterruptedDownloadResumesInTheNextPull) {
  serve({{"drop_at", {1234567}}});
  PullOptions o = options();
  o.retry.max_attempts = 1;  // the cut is final for this pull
  expect_error([&] { pull(parse_model_ref(kRepo + ":Q4_0"), o); }, {"gave up"});
  ASSERT_EQ(std::filesystem::file_size(entry() + "/LFM2-tiny-Q4_0.gguf.part"), 1234567u);
  const auto listed = list_local_models(cache);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state, "downloaded 22%");
  server.clear_log();
  pull(parse_model_ref(kRepo + ":Q4_0"), options());
  EXPECT_EQ(server.requests_to("/resolve/").at(0)["range"], "bytes=1234567-");
  EXPECT_EQ(store::Store::open(entry()).source().sha256, sha_of_file(golden("lfm2moe-tiny.gguf")));
}

TEST_F(PullTest, TheBuiltInPinIsAskedForByCommitAndCheckedExactly) {
  const std::string pin_commit = "f97fc8a443da86c71818adf91baecde5b7ef4c50";
  server.configure(
      {{"repos",
        {{"LiquidAI/LFM2.5-24B-A2B-GGUF",
          hub_repo(pin_commit, {{"LFM2.5-24B-A2B-QAD-Q4_0.gguf", golden("lfm2moe-tiny.gguf")}})}}}});
  expect_error([&] { pull(parse_model_ref("lfm2.5-24b"), options()); },
               {"disagrees with diskformer's pin",
                "89617cc4d3a52e973ee8dea72c7df04285f582107385796ba903f81e540e4afa", "13578190880 bytes"});
  EXPECT_EQ(server.requests_to("/api/models/").at(0)["path"],
            "/api/models/LiquidAI/LFM2.5-24B-A2B-GGUF/revision/" + pin_commit + "?blobs=true");
  EXPECT_TRUE(server.requests_to("/resolve/").empty());
}

TEST_F(PullTest, HfResolvesLocallyOnceThereAndRecordsTheUse) {
  serve();
  const std::string d = resolve_hf(kRepo + ":Q4_0", options());
  EXPECT_EQ(d, entry());
  EXPECT_GT(read_record(d)->last_used, 0);
  // The hub is gone: the pulled model still runs.
  server.configure({{"repos", nlohmann::json::object()}});
  server.clear_log();
  EXPECT_EQ(resolve_hf(kRepo + ":Q4_0", options()), entry());
  EXPECT_EQ(resolve_hf(kRepo + "/LFM2-tiny-Q4_0.gguf", options()), entry());
  EXPECT_TRUE(server.requests().empty());
  // Another revision is not the pulled one.
  expect_error([&] { resolve_hf(kRepo + ":F16", options()); }, {"no such model or revision"});
}

TEST_F(PullTest, ListAndRemove) {
  serve();
  pull(parse_model_ref(kRepo + ":Q4_0"), options());
  // A store that `-m FILE.gguf` made sits beside the pulled ones.
  store::IngestOptions io;
  io.cache_root = cache;
  const std::string ingested = store::ingest(golden("qwen3moe-tiny.gguf"), io).dir;
  auto all = list_local_models(cache);
  ASSERT_EQ(all.size(), 2u);
  const LocalModel* pulled = all[0].record ? &all[0] : &all[1];
  const LocalModel* other = all[0].record ? &all[1] : &all[0];
  EXPECT_EQ(pulled->name, "test-org--LFM2-tiny-GGUF--LFM2-tiny-Q4_0");
  EXPECT_EQ(pulled->state, "ready");
  EXPECT_EQ(pulled->source, kRepo + "/LFM2-tiny-Q4_0.gguf");
  EXPECT_GT(pulled->bytes, 0u);
  EXPECT_EQ(other->source, "ingested from qwen3moe-tiny.gguf");
  EXPECT_EQ(other->dir, ingested);

  EXPECT_EQ(find_local_model(cache, kRepo + ":Q4_0").dir, entry());
  expect_error([&] { find_local_model(cache, "nothing-like-it"); },
               {"no model 'nothing-like-it'", pulled->name});
  EXPECT_GT(remove_local_model(find_local_model(cache, pulled->name)), 0u);
  EXPECT_FALSE(exists(entry()));
  remove_local_model(find_local_model(cache, other->name));
  EXPECT_FALSE(exists(ingested));
  EXPECT_TRUE(list_local_models(cache).empty());
}

TEST_F(PullTest, RemoveWaitsForNoOneAndRefusesDuringAPull) {
  serve();
  pull(parse_model_ref(kRepo + ":Q4_0"), options());
  const LocalModel m = find_local_model(cache, kRepo + ":Q4_0");
  {
    const EntryLock busy(m.dir, false);
    expect_error([&] { remove_local_model(m); }, {"another diskformer process"});
  }
  remove_local_model(m);
  EXPECT_FALSE(exists(m.dir));
}

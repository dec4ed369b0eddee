// `diskformer ingest` and `diskformer verify` as a user runs them: exit codes, the summary, and the error
// that names a damaged record.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "store/store.h"
#include "test_store_util.h"

using namespace df;
using namespace df::testing;

namespace {

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

struct Run {
  int code = -1;
  std::string out, err;
};

// Runs the binary with its cache under `cache` (never the user's ~/.cache).
Run run(const std::string& cache, const std::string& args) {
  std::string out = cache + "/stdout.txt", err = cache + "/stderr.txt";
  std::string cmd =
      fmt::format("XDG_CACHE_HOME='{}' '{}' {} > '{}' 2> '{}'", cache, DF_BINARY, args, out, err);
  int status = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp_text(out);
  r.err = slurp_text(err);
  return r;
}

TEST(CliIngest, IngestThenVerifyAndReingestIsANoOp) {
  auto tmp = scratch_dir();
  auto store = tmp + "/store";
  auto r = run(tmp, fmt::format("ingest '{}' -o '{}'", golden("gpt-oss-tiny.gguf"), store));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_HAS(r.out, "store " + store);
  EXPECT_HAS(r.out, "4 MoE layers x 16 experts");
  EXPECT_HAS(r.out, "gpt-oss-tiny.gguf");
  store::Store::open(store);

  r = run(tmp, fmt::format("verify '{}'", store));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_HAS(r.out, "OK: 64 records");

  r = run(tmp, fmt::format("ingest '{}' -o '{}'", golden("gpt-oss-tiny.gguf"), store));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_HAS(r.out, "already complete");
}

TEST(CliIngest, VerifyNamesTheDamagedRecordAndExitsNonZero) {
  auto tmp = scratch_dir();
  auto store = tmp + "/store";
  ASSERT_EQ(run(tmp, fmt::format("ingest '{}' -o '{}'", golden("lfm2moe-tiny.gguf"), store)).code, 0);
  auto s = store::Store::open(store);
  auto bytes = slurp(s.experts_path());
  bytes[s.layout().record_offset(1, 7) + 4242] ^= 0x20;
  write_file(s.experts_path(), bytes);
  auto r = run(tmp, fmt::format("verify '{}'", store));
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "error: store " + store);
  EXPECT_HAS(r.err, "MoE layer 1 (blk.3), expert 7");
  EXPECT_HAS(r.err, "diskformer ingest lfm2moe-tiny.gguf -o " + store + " --force");

  r = run(tmp, fmt::format("ingest '{}' -o '{}' --force", golden("lfm2moe-tiny.gguf"), store));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(run(tmp, fmt::format("verify '{}'", store)).code, 0);
}

TEST(CliIngest, VerifyAgainstAnotherSourceAndMissingStores) {
  auto tmp = scratch_dir();
  auto store = tmp + "/store";
  ASSERT_EQ(run(tmp, fmt::format("ingest '{}' -o '{}'", golden("qwen3moe-tiny.gguf"), store)).code, 0);
  auto r = run(tmp, fmt::format("verify '{}' --source '{}'", store, golden("lfm2moe-tiny.gguf")));
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "was made from qwen3moe-tiny.gguf");
  r = run(tmp, fmt::format("verify '{}' --source '{}'", store, golden("qwen3moe-tiny.gguf")));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_HAS(r.out, "made from qwen3moe-tiny.gguf");
  r = run(tmp, fmt::format("verify '{}/nowhere'", tmp));
  EXPECT_EQ(r.code, 1);
  EXPECT_HAS(r.err, "does not exist");
}

TEST(CliIngest, WithoutOutputTheStoreGoesToTheCache) {
  auto tmp = scratch_dir();
  auto r = run(tmp, fmt::format("ingest '{}'", golden("lfm2moe-tiny.gguf")));
  ASSERT_EQ(r.code, 0) << r.err;
  auto info = nlohmann::json::parse(slurp_text(golden("lfm2moe-tiny.json")));
  std::string prefix = info["model"]["sha256"].get<std::string>().substr(0, 16);
  auto dir = tmp + "/diskformer/" + prefix;
  EXPECT_EQ(store::Store::open(dir).source().sha256.substr(0, 16), prefix);
  EXPECT_HAS(r.out, "store " + dir);
}

}  // namespace

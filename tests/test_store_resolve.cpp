// First use of a .gguf: the store goes to <cache>/<sha256 prefix>/, the sha256 is remembered by path and stat
// stamp so the next use does not hash 13.5 GB again, and any change of the file forces a new hash.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "store/ingest.h"
#include "store/source_id.h"
#include "store/store.h"
#include "test_store_util.h"

using namespace df;
using namespace df::testing;

namespace {

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

std::string golden_sha(const std::string& model) {
  return nlohmann::json::parse(slurp_text(golden(model + ".json")))["model"]["sha256"].get<std::string>();
}

struct Phases {
  std::set<std::string> seen;
  store::ProgressFn fn() {
    return [this](std::string_view phase, uint64_t, uint64_t) { seen.insert(std::string(phase)); };
  }
};

store::IngestOptions cached(const std::string& root, Phases& phases) {
  store::IngestOptions o;
  o.cache_root = root;
  o.progress = phases.fn();
  return o;
}

TEST(SourceId, Sha256MatchesTheGoldenManifests) {
  for (const char* m : {"lfm2moe-tiny", "qwen3moe-tiny", "gpt-oss-tiny"})
    EXPECT_EQ(store::sha256_file(golden(std::string(m) + ".gguf")), golden_sha(m)) << m;
  auto empty = scratch_dir() + "/empty";
  write_text(empty, "");
  EXPECT_EQ(store::sha256_file(empty), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Resolve, DefaultDirIsTheSha256PrefixAndTheIndexSkipsTheSecondHash) {
  auto root = scratch_dir();
  Phases first, second;
  auto dir = store::resolve_store(golden("lfm2moe-tiny.gguf"), cached(root, first));
  EXPECT_EQ(dir, (fs::path(root) / golden_sha("lfm2moe-tiny").substr(0, 16)).string());
  EXPECT_TRUE(first.seen.count("hashing source"));
  EXPECT_TRUE(first.seen.count("writing experts"));
  EXPECT_EQ(store::Store::open(dir).source().sha256, golden_sha("lfm2moe-tiny"));

  auto again = store::resolve_store(golden("lfm2moe-tiny.gguf"), cached(root, second));
  EXPECT_EQ(again, dir);
  EXPECT_TRUE(second.seen.empty()) << "neither hashed nor ingested again";
  EXPECT_EQ(store::index_lookup(root, golden("lfm2moe-tiny.gguf")), golden_sha("lfm2moe-tiny"));
}

TEST(Resolve, AChangedFileIsHashedAgainAndGetsItsOwnStore) {
  auto root = scratch_dir();
  auto model = root + "/model.gguf";
  fs::copy_file(golden("qwen3moe-tiny.gguf"), model);
  Phases p1, p2, p3;
  auto dir1 = store::resolve_store(model, cached(root, p1));

  // Same bytes, new mtime: hashed again (the stamp changed), same store.
  struct timespec times[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, model.c_str(), times, 0), 0);
  EXPECT_EQ(store::index_lookup(root, model), std::nullopt);
  EXPECT_EQ(store::resolve_store(model, cached(root, p2)), dir1);
  EXPECT_TRUE(p2.seen.count("hashing source"));
  EXPECT_FALSE(p2.seen.count("writing experts"));

  // New bytes: another sha256, another store; the old store says it is not this file's.
  auto bytes = slurp(model);
  bytes[bytes.size() - 10] ^= 1;
  write_file(model, bytes);
  auto dir2 = store::resolve_store(model, cached(root, p3));
  EXPECT_NE(dir2, dir1);
  EXPECT_TRUE(p3.seen.count("writing experts"));
  auto now = store::Store::open(dir2).source();
  EXPECT_HAS(error_of([&] { store::Store::open(dir1).check_source(now); }), "was made from model.gguf");
}

TEST(Resolve, ADamagedIndexIsOnlyALostCache) {
  auto root = scratch_dir();
  write_text(root + "/index.json", "{ not json");
  Phases p;
  auto dir = store::resolve_store(golden("gpt-oss-tiny.gguf"), cached(root, p));
  EXPECT_TRUE(p.seen.count("hashing source"));
  EXPECT_EQ(store::index_lookup(root, golden("gpt-oss-tiny.gguf")), golden_sha("gpt-oss-tiny"));
  store::Store::open(dir);
}

TEST(Resolve, AnExplicitDirectoryHoldingAnotherModelIsRefused) {
  auto root = scratch_dir();
  Phases p;
  auto opt = cached(root, p);
  opt.output_dir = root + "/store";
  store::resolve_store(golden("lfm2moe-tiny.gguf"), opt);
  auto msg = error_of([&] { store::resolve_store(golden("qwen3moe-tiny.gguf"), opt); });
  EXPECT_HAS(msg, "holds the store of lfm2moe-tiny.gguf");
  EXPECT_HAS(msg, golden_sha("qwen3moe-tiny"));
}

TEST(Resolve, CacheRootFollowsXdgCacheHome) {
  const char* old_xdg = std::getenv("XDG_CACHE_HOME");
  std::string saved = old_xdg ? old_xdg : "";
  ::setenv("XDG_CACHE_HOME", "/some/cache", 1);
  EXPECT_EQ(store::default_cache_root(), "/some/cache/diskformer");
  ::setenv("XDG_CACHE_HOME", "relative/ignored", 1);  // the XDG spec says relative paths are invalid
  const char* home = std::getenv("HOME");
  if (home) {
    EXPECT_EQ(store::default_cache_root(), std::string(home) + "/.cache/diskformer");
  }
  if (old_xdg)
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    ::unsetenv("XDG_CACHE_HOME");
}

}  // namespace

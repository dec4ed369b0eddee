// A damaged store or a failing disk gives a df::Error that names experts.bin, the MoE layer, the expert and
// the byte range, never a crash and never wrong bytes: injected EIO, short reads, a flipped byte, a truncated
// file.
#include <filesystem>

#include "error_matchers.h"
#include "stream/expert_cache.h"
#include "test_stream_fixture.h"
#include "util/error.h"

namespace df::stream {
namespace {

using testing::make_store;
using testing::SyntheticStore;

constexpr int kLayers = 3, kExperts = 6;

struct Mode {
  ReaderKind reader;
  IoMode io;
  std::string name() const {
    return fmt::format("{} {}", reader == ReaderKind::kPread ? "pread" : "uring",
                       io == IoMode::kDirect ? "direct" : "buffered");
  }
};
const Mode kModes[] = {{ReaderKind::kUring, IoMode::kDirect},
                       {ReaderKind::kUring, IoMode::kBuffered},
                       {ReaderKind::kPread, IoMode::kDirect},
                       {ReaderKind::kPread, IoMode::kBuffered}};

ExpertCacheOptions options(const Mode& m, uint64_t slots = 8) {
  ExpertCacheOptions o;
  o.slots = slots;
  o.min_slots = 2;
  o.reader = m.reader;
  o.io = m.io;
  o.pread_threads = 1;  // reads start in queue order, so "the n-th read" is a known record
  o.queue_depth = 4;
  o.notice = [](const std::string&) {};
  return o;
}

// The message of the df::Error that waiting for (layer, expert) throws; empty (and a test failure) otherwise.
std::string wait_error(ExpertCache& cache, const ExpertHandle& h) {
  try {
    cache.wait(h);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for MoE layer " << h.layer << " expert " << h.expert;
  return {};
}

void expect_names_record(const std::string& msg, const SyntheticStore& s, int layer, int expert) {
  const uint64_t a = s.source.layout.record_offset(layer, expert), b = a + s.record_bytes();
  EXPECT_NE(msg.find(s.source.experts_path), std::string::npos) << msg;
  EXPECT_NE(msg.find(fmt::format("MoE layer {} expert {} (bytes {}..{})", layer, expert, a, b)),
            std::string::npos)
      << msg;
}

TEST(StreamFaults, InjectedEioFailsThatRecordOnlyAndARetryReadsIt) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  for (const Mode& m : kModes) {
    ExpertCacheOptions o = options(m);
    o.faults.eio_on_read = 1;
    ExpertCache cache(store.source, o);
    std::vector<ExpertHandle> h(3);
    cache.acquire(1, std::vector<int32_t>{2, 4, 5}, h);
    EXPECT_TRUE(store.matches(1, 2, cache.wait(h[0]))) << m.name();
    const std::string msg = wait_error(cache, h[1]);
    expect_names_record(msg, store, 1, 4);
    EXPECT_NE(msg.find("Input/output error"), std::string::npos) << msg;
    EXPECT_TRUE(store.matches(1, 5, cache.wait(h[2]))) << m.name();
    cache.release(h);
    EXPECT_FALSE(cache.resident(1, 4));
    const ExpertHandle again = cache.acquire(1, 4);  // the fault was transient: read anew
    EXPECT_TRUE(store.matches(1, 4, cache.wait(again))) << m.name();
    cache.release(again);
    EXPECT_EQ(cache.telemetry().total.read_failures, 1u) << m.name();
  }
}

TEST(StreamFaults, ShortReadsAreResubmitted) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  for (const Mode& m : kModes) {
    // O_DIRECT reads come back short only at block boundaries; the page cache may stop anywhere.
    for (uint64_t short_bytes : {uint64_t{4096}, uint64_t{100}}) {
      if (m.io == IoMode::kDirect && short_bytes % 512) continue;
      ExpertCacheOptions o = options(m);
      o.faults.short_on_read = 0;
      o.faults.short_bytes = short_bytes;
      ExpertCache cache(store.source, o);
      const ExpertHandle h = cache.acquire(2, 3);
      EXPECT_TRUE(store.matches(2, 3, cache.wait(h))) << m.name() << " short " << short_bytes;
      cache.release(h);
      EXPECT_EQ(cache.telemetry().total.bytes_read, store.record_bytes());
    }
  }
}

TEST(StreamFaults, FlippedByteIsAChecksumErrorEveryTime) {
  const std::string dir = testing::fresh_dir();
  const SyntheticStore store = make_store(dir, kLayers, kExperts);
  store.flip_byte(2, 1, 5000);
  for (const Mode& m : kModes) {
    ExpertCache cache(store.source, options(m));
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::vector<ExpertHandle> h(2);
      cache.acquire(2, std::vector<int32_t>{0, 1}, h);
      EXPECT_TRUE(store.matches(2, 0, cache.wait(h[0]))) << m.name();
      const std::string msg = wait_error(cache, h[1]);
      expect_names_record(msg, store, 2, 1);
      EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
      cache.release(h);
    }
    // A guess that reads the damaged record is dropped, and the demand that follows still fails.
    cache.prefetch(2, std::vector<int32_t>{1});
    cache.drain();
    EXPECT_FALSE(cache.resident(2, 1));
    const ExpertHandle h = cache.acquire(2, 1);
    EXPECT_NE(wait_error(cache, h).find("checksum mismatch"), std::string::npos);
    cache.release(h);
  }
}

TEST(StreamFaults, TruncatedFileIsRefusedAtOpenNamingTheFirstMissingRecord) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  const uint64_t cut = store.source.layout.record_offset(2, 4) + 1234;
  store.truncate_file(cut);
  try {
    ExpertCache cache(store.source, options(kModes[0]));
    FAIL() << "a truncated experts.bin was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    expect_names_record(msg, store, 2, 4);
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  }
}

TEST(StreamFaults, FileTruncatedWhileOpenFailsTheReadsPastTheEnd) {
  for (const Mode& m : kModes) {
    for (uint64_t into_record : {uint64_t{0}, uint64_t{4096}, uint64_t{777}}) {
      const SyntheticStore store =
          make_store(testing::fresh_dir(fmt::format("_{}", into_record)), kLayers, kExperts);
      ExpertCache cache(store.source, options(m));
      store.truncate_file(store.source.layout.record_offset(2, 3) + into_record);
      std::vector<ExpertHandle> h(2);
      cache.acquire(2, std::vector<int32_t>{2, 3}, h);
      EXPECT_TRUE(store.matches(2, 2, cache.wait(h[0]))) << m.name();
      const std::string msg = wait_error(cache, h[1]);
      expect_names_record(msg, store, 2, 3);
      EXPECT_NE(msg.find("the file ends at byte"), std::string::npos) << m.name() << ": " << msg;
      cache.release(h);
    }
  }
}

TEST(StreamFaults, WrongSizedOrMissingFileIsRefused) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  RecordSource bad = store.source;
  bad.experts_path += ".missing";
  df::testing::expect_error(
      [&] { ExpertCache(bad, options(kModes[0])); },
      {bad.experts_path + ": cannot open the expert records: No such file or directory"});
  bad = store.source;
  bad.checksums.pop_back();
  df::testing::expect_error(
      [&] { ExpertCache(bad, options(kModes[0])); },
      {bad.experts_path + ": " + std::to_string(bad.checksums.size()) + " record checksums for " +
       std::to_string(bad.checksums.size() + 1) + " records"});
  bad = store.source;
  bad.layout.record_bytes = 6000;
  df::testing::expect_error([&] { ExpertCache(bad, options(kModes[0])); },
                            {"records of 6000 bytes are not a multiple of", "re-run diskformer ingest"});
  bad = store.source;
  bad.layout.layers[1].down.offset = bad.layout.record_bytes - 8;
  df::testing::expect_error([&] { ExpertCache(bad, options(kModes[0])); },
                            {"MoE layer 1 down rows", "do not fit in a record of"});
}

TEST(StreamFaults, FileSystemWithoutODirectFallsBackWithANotice) {
  const SyntheticStore store = make_store(testing::fresh_dir(), kLayers, kExperts);
  std::vector<std::string> notices;
  ExpertCacheOptions o = options(kModes[0]);
  o.faults.refuse_direct = true;
  o.notice = [&](const std::string& line) { notices.push_back(line); };
  ExpertCache cache(store.source, o);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("refuses O_DIRECT"), std::string::npos) << notices[0];
  EXPECT_NE(cache.describe().find("page cache"), std::string::npos) << cache.describe();
  const ExpertHandle h = cache.acquire(0, 5);
  EXPECT_TRUE(store.matches(0, 5, cache.wait(h)));
  cache.release(h);
}

TEST(StreamFaults, TmpfsWorksWhateverItSaysAboutODirect) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string dir = "/dev/shm/df_stream_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const SyntheticStore store = make_store(dir, kLayers, kExperts);
  std::vector<std::string> notices;
  ExpertCacheOptions o = options(kModes[0]);
  o.notice = [&](const std::string& line) { notices.push_back(line); };
  {
    ExpertCache cache(store.source, o);
    const ExpertHandle h = cache.acquire(1, 1);
    EXPECT_TRUE(store.matches(1, 1, cache.wait(h)));
    cache.release(h);
    // Linux before 6.6 refuses O_DIRECT on tmpfs: then exactly one notice says so.
    const bool direct = cache.describe().find("O_DIRECT") != std::string::npos;
    EXPECT_EQ(notices.size(), direct ? 0u : 1u);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace df::stream

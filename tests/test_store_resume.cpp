// A killed ingest (a child process SIGKILLed at every stage, and at arbitrary moments) never leaves a
// directory that opens as a store, and the next ingest resumes from its journal -- re-checking what it keeps
// -- and writes exactly the bytes of an uninterrupted ingest.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "store/ingest.h"
#include "store/store.h"
#include "test_store_util.h"

using namespace df;
using namespace df::testing;

namespace {

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

const char* kModel = "lfm2moe-tiny.gguf";

std::string reference_dir() { return fixture_dir("resume-reference"); }

// Sixteen experts (one MoE layer) per batch and a journal checkpoint after every batch: 4 checkpoints for
// lfm2moe-tiny (records of 57344 bytes, slabs of 18432).
store::IngestOptions resume_options(const std::string& dir) {
  auto opt = quiet_options(dir);
  opt.memory_budget = 16 * (57344 + 18432);
  opt.checkpoint_bytes = 0;
  return opt;
}

class Resume : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(reference_dir());
    store::ingest(golden(kModel), quiet_options(reference_dir()));
  }
  static void TearDownTestSuite() { fs::remove_all(reference_dir()); }

  // Ingests in a child process that kills itself with SIGKILL at `point` once `n` records are done.
  static void ingest_killed_at(const std::string& dir, const std::string& point, uint64_t n) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto opt = resume_options(dir);
      opt.test_hook = [&](std::string_view p, uint64_t done) {
        if (p == point && done >= n) ::raise(SIGKILL);
      };
      try {
        store::ingest(golden(kModel), opt);
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the child was not killed at " << point;
  }

  static void expect_identical_to_reference(const std::string& dir) {
    for (const char* f : {store::kManifestFile, store::kExpertsFile, store::kDenseFile})
      EXPECT_EQ(slurp((fs::path(dir) / f).string()), slurp((fs::path(reference_dir()) / f).string())) << f;
    EXPECT_FALSE(fs::exists(fs::path(dir) / store::kJournalFile));
    EXPECT_FALSE(fs::exists(fs::path(dir) / store::kExpertsPartialFile));
    for (const auto& e : fs::directory_iterator(dir))
      EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }

  static store::IngestResult resume(const std::string& dir, std::string* notes = nullptr) {
    auto opt = resume_options(dir);
    opt.on_message = [&](const std::string& m) {
      if (notes) *notes += m + "\n";
    };
    opt.checkpoint_bytes = 1ull << 30;
    return store::ingest(golden(kModel), opt);
  }
};

TEST_F(Resume, KilledAtEachStageLooksIncompleteAndResumesToTheSameBytes) {
  struct Case {
    const char* point;
    uint64_t n, reused;
  };
  for (Case c : {Case{"checkpoint", 32, 32}, Case{"experts_written", 0, 64}, Case{"dense_written", 0, 64},
                 Case{"experts_renamed", 0, 64}}) {
    SCOPED_TRACE(fmt::format("{} {}", c.point, c.n));
    auto dir = scratch_dir(fmt::format("_{}_{}", c.point, c.n));
    ingest_killed_at(dir, c.point, c.n);
    EXPECT_HAS(error_of([&] { store::Store::open(dir); }), "is incomplete");
    std::string notes;
    auto r = resume(dir, &notes);
    EXPECT_EQ(r.records_reused, c.reused);
    EXPECT_HAS(notes, fmt::format("resuming the interrupted ingest of {}: {} of 64 records", dir, c.reused));
    expect_identical_to_reference(dir);
    store::Store::open(dir).verify(false);
  }
}

TEST_F(Resume, KilledAfterTheManifestIsAlreadyAStore) {
  auto dir = scratch_dir();
  ingest_killed_at(dir, "manifest_written", 0);
  store::Store::open(dir).verify(false);
  auto r = resume(dir);
  EXPECT_TRUE(r.already_complete);
  expect_identical_to_reference(dir);  // the stale journal is gone too
}

TEST_F(Resume, KilledAtArbitraryMomentsNeverLeavesAStoreThatLooksComplete) {
  for (int delay_ms : {0, 30, 80}) {
    SCOPED_TRACE(delay_ms);
    auto dir = scratch_dir(fmt::format("_{}", delay_ms));
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        store::ingest(golden(kModel), resume_options(dir));
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 3);
    // Whatever the moment: either not a store, or a complete and correct one.
    bool opens = false;
    try {
      store::Store::open(dir).verify(false);
      opens = true;
    } catch (const Error& e) {
      EXPECT_TRUE(std::string(e.what()).find("incomplete") != std::string::npos ||
                  std::string(e.what()).find("not a diskformer store") != std::string::npos)
          << e.what();
    }
    auto r = resume(dir);
    EXPECT_EQ(r.already_complete, opens);
    expect_identical_to_reference(dir);
  }
}

TEST_F(Resume, RecordsDamagedAfterTheCheckpointAreWrittenAgain) {
  auto dir = scratch_dir();
  ingest_killed_at(dir, "checkpoint", 32);
  auto partial = (fs::path(dir) / store::kExpertsPartialFile).string();
  auto bytes = slurp(partial);
  bytes[10 * 57344 + 333] ^= 0x5a;  // record 10
  write_file(partial, bytes);
  std::string notes;
  auto r = resume(dir, &notes);
  EXPECT_EQ(r.records_reused, 10u);
  EXPECT_HAS(notes, "22 listed records were lost or damaged");
  expect_identical_to_reference(dir);
}

TEST_F(Resume, APartialFileShorterThanTheJournalSaysIsResumedFromWhatIsThere) {
  auto dir = scratch_dir();
  ingest_killed_at(dir, "checkpoint", 32);
  fs::resize_file(fs::path(dir) / store::kExpertsPartialFile, 7 * 57344 + 100);
  auto r = resume(dir);
  EXPECT_EQ(r.records_reused, 7u);
  expect_identical_to_reference(dir);
}

TEST_F(Resume, AJournalOfAnotherSourceRestartsFromScratch) {
  auto dir = scratch_dir();
  ingest_killed_at(dir, "checkpoint", 16);
  std::string notes;
  auto opt = resume_options(dir);
  opt.on_message = [&](const std::string& m) { notes += m; };
  auto r = store::ingest(golden("qwen3moe-tiny.gguf"), opt);
  EXPECT_EQ(r.records_reused, 0u);
  EXPECT_HAS(notes, "restarting the ingest");
  EXPECT_HAS(notes, "another source (lfm2moe-tiny.gguf)");
  auto s = store::Store::open(dir);
  EXPECT_EQ(s.architecture(), "qwen3moe");
  s.verify(false);
}

TEST_F(Resume, AFailureInsideTheProcessLeavesAResumableDirectory) {
  auto dir = scratch_dir();
  auto opt = resume_options(dir);
  opt.test_hook = [](std::string_view p, uint64_t done) {
    if (p == "checkpoint" && done >= 32) df::fail("injected failure after {} records", done);
  };
  EXPECT_HAS(error_of([&] { store::ingest(golden(kModel), opt); }), "injected failure after 32 records");
  EXPECT_HAS(error_of([&] { store::Store::open(dir); }), "is incomplete");
  EXPECT_EQ(resume(dir).records_reused, 32u);
  expect_identical_to_reference(dir);
}

TEST_F(Resume, ASecondIngestOfTheSameDirectoryIsRefusedWhileOneRuns) {
  auto dir = scratch_dir();
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);  // what a running ingest holds
  EXPECT_HAS(error_of([&] { store::ingest(golden(kModel), quiet_options(dir)); }),
             "another `diskformer ingest` is writing");
  ::close(fd);
  store::ingest(golden(kModel), quiet_options(dir));
  expect_identical_to_reference(dir);
}

}  // namespace

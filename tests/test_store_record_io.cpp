// The runtime's record reader: correct bytes through short reads and EINTR; EIO, early end of file and a bad
// descriptor become errors that name the file, the record and the byte range; checksums catch damage.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>

#include "store/ingest.h"
#include "store/record_io.h"
#include "store/store.h"
#include "test_store_util.h"

using namespace df;
using namespace df::testing;

namespace {

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

class RecordIo : public ::testing::Test {
 protected:
  static std::string dir() { return fixture_dir("record-io"); }
  static void SetUpTestSuite() {
    fs::remove_all(dir());
    store::ingest(golden("qwen3moe-tiny.gguf"), quiet_options(dir()));
  }
  static void TearDownTestSuite() { fs::remove_all(dir()); }
  void SetUp() override {
    store_.emplace(store::Store::open(dir()));
    src_.emplace(gguf::File::open(golden("qwen3moe-tiny.gguf")));
    fd_ = ::open(store_->experts_path().c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
  }
  std::vector<uint8_t> expected(int layer, int expert) {
    return expected_record(*src_, expected_layers(*src_)[static_cast<size_t>(layer)], expert,
                           store_->layout().record_bytes);
  }
  std::string read_error(const store::PreadFn& fn, int layer = 1, int expert = 2) {
    std::vector<uint8_t> buf(store_->layout().record_bytes);
    return error_of([&] {
      store::read_record(fd_, store_->experts_path(), store_->layout(), layer, expert, buf.data(), fn);
    });
  }
  std::optional<store::Store> store_;
  std::optional<gguf::File> src_;
  int fd_ = -1;
};

TEST_F(RecordIo, ReadsEveryRecordAsTheGgufHasIt) {
  store::RecordReader reader(*store_);
  const auto& L = store_->layout();
  std::vector<uint8_t> buf(L.record_bytes);
  for (int l = 0; l < L.n_moe_layers; ++l)
    for (int e = 0; e < L.n_expert; e += 5) {
      reader.read(l, e, buf.data());
      EXPECT_EQ(buf, expected(l, e)) << l << " " << e;
    }
}

TEST_F(RecordIo, ShortReadsAndEintrAreRetried) {
  int calls = 0;
  store::PreadFn dribble = [&](int fd, void* b, size_t n, off_t off) -> ssize_t {
    if (++calls % 3 == 0) {
      errno = EINTR;
      return -1;
    }
    return ::pread(fd, b, std::min<size_t>(n, 1000), off);
  };
  std::vector<uint8_t> buf(store_->layout().record_bytes);
  store::read_record(fd_, store_->experts_path(), store_->layout(), 3, 15, buf.data(), dribble);
  EXPECT_EQ(buf, expected(3, 15));
  EXPECT_GT(calls, static_cast<int>(buf.size() / 1000));
}

TEST_F(RecordIo, EioNamesFileLayerExpertAndRange) {
  const auto& L = store_->layout();
  bool first = true;
  store::PreadFn eio_midway = [&](int fd, void* b, size_t n, off_t off) -> ssize_t {
    if (first) {  // half the record arrives, then the disk fails
      first = false;
      return ::pread(fd, b, n / 2, off);
    }
    errno = EIO;
    return -1;
  };
  auto msg = read_error(eio_midway);
  EXPECT_HAS(msg, store_->experts_path());
  EXPECT_HAS(msg, fmt::format("MoE layer 1 (blk.1), expert 2, bytes [{}, {})", L.record_offset(1, 2),
                              L.record_offset(1, 3)));
  EXPECT_HAS(msg, fmt::format("at offset {}", L.record_offset(1, 2) + L.record_bytes / 2));
  EXPECT_HAS(msg, "Input/output error");
}

TEST_F(RecordIo, EndOfFileInsideARecordSaysTruncated) {
  store::PreadFn eof = [&](int, void*, size_t, off_t) -> ssize_t { return 0; };
  auto msg = read_error(eof);
  EXPECT_HAS(msg, "ends at byte");
  EXPECT_HAS(msg, "expert 2");
  EXPECT_HAS(msg, "truncated");

  // The same with a real file cut in the middle of the last record.
  auto cut = scratch_dir() + "/experts.bin";
  fs::copy_file(store_->experts_path(), cut);
  fs::resize_file(cut, store_->layout().experts_bytes() - 100);
  int fd = ::open(cut.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> buf(store_->layout().record_bytes);
  msg = error_of([&] { store::read_record(fd, cut, store_->layout(), 3, 15, buf.data()); });
  ::close(fd);
  EXPECT_HAS(msg, cut + " ends at byte " + std::to_string(store_->layout().experts_bytes() - 100));
  EXPECT_HAS(msg, "MoE layer 3 (blk.3), expert 15");
}

TEST_F(RecordIo, ABadDescriptorIsAnErrorNotACrash) {
  ::close(fd_);
  fd_ = -1;
  std::vector<uint8_t> buf(store_->layout().record_bytes);
  auto msg = error_of([&] { store::read_record(-1, "experts.bin", store_->layout(), 0, 0, buf.data()); });
  EXPECT_HAS(msg, "Bad file descriptor");
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  msg = error_of([&] { store::read_record(p[0], "pipe", store_->layout(), 0, 1, buf.data()); });
  ::close(p[0]);
  ::close(p[1]);
  EXPECT_HAS(msg, "Illegal seek");
}

TEST_F(RecordIo, OutOfRangeIdsAreRefused) {
  std::vector<uint8_t> buf(store_->layout().record_bytes);
  EXPECT_HAS(read_error({}, 4, 0), "MoE layer 4 is out of range");
  EXPECT_HAS(read_error({}, 0, 16), "expert 16 is out of range");
  EXPECT_HAS(read_error({}, -1, 0), "out of range");
}

TEST_F(RecordIo, ChecksumsCatchABitFlipInMemory) {
  std::vector<uint8_t> buf(store_->layout().record_bytes);
  store::read_record(fd_, store_->experts_path(), store_->layout(), 2, 9, buf.data());
  store::verify_record(*store_, 2, 9, buf.data());
  buf[store_->layout().layers[2].down.offset + 5] ^= 0x80;
  auto msg = error_of([&] { store::verify_record(*store_, 2, 9, buf.data()); });
  EXPECT_HAS(msg, "MoE layer 2 (blk.2), expert 9");
  EXPECT_HAS(msg, "the manifest says");
  // A record read into the wrong slot is caught as well.
  store::read_record(fd_, store_->experts_path(), store_->layout(), 2, 8, buf.data());
  EXPECT_HAS(error_of([&] { store::verify_record(*store_, 2, 9, buf.data()); }), "expert 9");
}

TEST_F(RecordIo, ReaderWithVerificationRefusesADamagedRecord) {
  auto dir = copy_store(RecordIo::dir(), scratch_dir());
  auto bytes = slurp(dir + "/experts.bin");
  auto s = store::Store::open(dir);
  bytes[s.layout().record_offset(0, 3) + 17] ^= 4;
  write_file(dir + "/experts.bin", bytes);
  store::RecordReader checked(s), unchecked(s, false);
  std::vector<uint8_t> buf(s.layout().record_bytes);
  unchecked.read(0, 3, buf.data());
  EXPECT_HAS(error_of([&] { checked.read(0, 3, buf.data()); }), "MoE layer 0 (blk.0), expert 3");
  checked.read(0, 4, buf.data());
}

}  // namespace

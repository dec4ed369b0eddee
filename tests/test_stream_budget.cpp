// --expert-cache sizes, the automatic budget from /proc/meminfo and the cgroup limit, and the minimum.
#include <filesystem>
#include <fstream>

#include "stream/byte_size.h"
#include "stream/cache_budget.h"
#include "test_stream_fixture.h"
#include "util/error.h"

namespace df::stream {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20, kGiB = uint64_t{1} << 30;

TEST(StreamBudget, ParsesSizes) {
  EXPECT_EQ(parse_byte_size("512M", "--expert-cache"), 512 * kMiB);
  EXPECT_EQ(parse_byte_size("4G", "x"), 4 * kGiB);
  EXPECT_EQ(parse_byte_size("1.5G", "x"), 3 * kGiB / 2);
  EXPECT_EQ(parse_byte_size("123456", "x"), 123456u);
  EXPECT_EQ(parse_byte_size("64k", "x"), 64u * 1024);
  EXPECT_EQ(parse_byte_size("2GiB", "x"), 2 * kGiB);
  EXPECT_EQ(parse_byte_size("3mb", "x"), 3 * kMiB);
  EXPECT_EQ(parse_byte_size("1T", "x"), 1024 * kGiB);
}

TEST(StreamBudget, RejectsNonSizesNamingTheFlag) {
  for (const char* bad : {"", "G", "-1G", "1.5", "4X", "1..5G", "0", "0M", "4 G", "99999999999T"}) {
    try {
      parse_byte_size(bad, "--expert-cache");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--expert-cache"), std::string::npos) << e.what();
    }
  }
}

TEST(StreamBudget, FormatsBytes) {
  EXPECT_EQ(format_bytes(812), "812 B");
  EXPECT_EQ(format_bytes(512 * kMiB), "512 MiB");
  EXPECT_EQ(format_bytes(4 * kGiB), "4.00 GiB");
  EXPECT_EQ(format_bytes(3 * kGiB / 2), "1.50 GiB");
  EXPECT_EQ(format_bytes(45 * kMiB + kMiB / 2), "45.5 MiB");
}

// A fake / with proc/meminfo, proc/self/cgroup and sys/fs/cgroup files.
struct FakeRoot {
  std::filesystem::path root;
  explicit FakeRoot(const std::string& dir) : root(dir) {}
  void write(const std::string& rel, const std::string& text) const {
    const auto p = root / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
};

TEST(StreamBudget, ReadsMemAvailableAndTheTightestCgroupV2Limit) {
  FakeRoot f(testing::fresh_dir());
  f.write("proc/meminfo", "MemTotal:       32000000 kB\nMemFree:  1000 kB\nMemAvailable:   16777216 kB\n");
  f.write("proc/self/cgroup", "0::/user.slice/job\n");
  f.write("sys/fs/cgroup/memory.max", "max\n");
  f.write("sys/fs/cgroup/user.slice/memory.max", std::to_string(8 * kGiB) + "\n");
  f.write("sys/fs/cgroup/user.slice/memory.current", std::to_string(1 * kGiB) + "\n");
  f.write("sys/fs/cgroup/user.slice/job/memory.max", std::to_string(12 * kGiB) + "\n");
  f.write("sys/fs/cgroup/user.slice/job/memory.current", std::to_string(1 * kGiB) + "\n");
  const MemorySnapshot m = read_memory_snapshot(f.root.string());
  EXPECT_EQ(m.mem_available, 16 * kGiB);
  ASSERT_TRUE(m.cgroup_limit);
  EXPECT_EQ(*m.cgroup_limit, 8 * kGiB);
  EXPECT_EQ(m.usable(), 7 * kGiB);
}

TEST(StreamBudget, ReadsCgroupV1AndIgnoresItsUnlimitedValue) {
  FakeRoot f(testing::fresh_dir());
  f.write("proc/meminfo", "MemAvailable:   4194304 kB\n");
  f.write("proc/self/cgroup", "12:cpu,cpuacct:/a\n11:memory:/docker/abc\n");
  f.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  f.write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", std::to_string(2 * kGiB) + "\n");
  f.write("sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", std::to_string(512 * kMiB) + "\n");
  MemorySnapshot m = read_memory_snapshot(f.root.string());
  EXPECT_EQ(m.mem_available, 4 * kGiB);
  EXPECT_EQ(m.usable(), 2 * kGiB - 512 * kMiB);

  f.write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n");
  m = read_memory_snapshot(f.root.string());
  EXPECT_FALSE(m.cgroup_limit);
  EXPECT_EQ(m.usable(), 4 * kGiB);
}

TEST(StreamBudget, NoMemAvailableIsAClearError) {
  FakeRoot f(testing::fresh_dir());
  f.write("proc/meminfo", "MemTotal: 100 kB\n");
  EXPECT_THROW(read_memory_snapshot(f.root.string()), Error);
}

TEST(StreamBudget, ThisMachineHasSomeMemory) {
  const MemorySnapshot m = read_memory_snapshot();
  EXPECT_GT(m.usable(), 0u);
}

BudgetRequest request(std::optional<uint64_t> bytes) {
  BudgetRequest r;
  r.explicit_bytes = bytes;
  r.reserve_bytes = 2 * kGiB;
  r.record_bytes = 4 * kMiB;
  r.total_records = 1000;
  r.min_records = 4;
  return r;
}

TEST(StreamBudget, ExplicitBudgetBecomesWholeSlots) {
  MemorySnapshot m;
  m.mem_available = 64 * kGiB;
  BudgetChoice c = choose_expert_budget(request(1 * kGiB + 3 * kMiB), m);
  EXPECT_EQ(c.slots, 256u);
  EXPECT_EQ(c.bytes, 1 * kGiB);
  EXPECT_FALSE(c.automatic);
  EXPECT_NE(c.description.find("1.00 GiB"), std::string::npos) << c.description;
  c = choose_expert_budget(request(100 * kGiB), m);  // never more slots than records
  EXPECT_EQ(c.slots, 1000u);
}

TEST(StreamBudget, ExplicitBudgetBelowOneLayerSaysTheMinimum) {
  MemorySnapshot m;
  m.mem_available = 64 * kGiB;
  try {
    choose_expert_budget(request(15 * kMiB), m);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--expert-cache 15.0 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the minimum is 16.0 MiB"), std::string::npos) << msg;
  }
}

TEST(StreamBudget, AutomaticBudgetLeavesRoomForTrunkKvAndHeadroom) {
  MemorySnapshot m;
  m.mem_available = 10 * kGiB;
  const BudgetChoice c = choose_expert_budget(request(std::nullopt), m);
  // 10 GiB - 2 GiB reserve - 1 GiB headroom (a tenth) = 7 GiB = 1792 records, capped at the 1000 the store
  // has.
  EXPECT_EQ(c.slots, 1000u);
  m.mem_available = 4 * kGiB;
  m.cgroup_limit = 3 * kGiB;
  m.cgroup_usage = 0;
  const BudgetChoice d = choose_expert_budget(request(std::nullopt), m);
  // 3 GiB usable - 2 GiB - 307.2 MiB headroom = 716.8 MiB → 179 records of 4 MiB.
  EXPECT_EQ(d.slots, 179u);
  EXPECT_TRUE(d.automatic);
  EXPECT_NE(d.description.find("auto"), std::string::npos) << d.description;
}

TEST(StreamBudget, SmallLimitsKeepAtLeast128MiBFree) {
  MemorySnapshot m;
  m.mem_available = 20 * kGiB;
  m.cgroup_limit = kGiB;
  BudgetRequest r = request(std::nullopt);
  r.reserve_bytes = 700 * kMiB;
  r.reserve_description = "trunk 600 MiB + state 100 MiB";
  // 1 GiB - 700 MiB reserve - 128 MiB (more than a tenth) = 196 MiB = 49 records of 4 MiB.
  const BudgetChoice c = choose_expert_budget(r, m);
  EXPECT_EQ(c.slots, 49u);
  EXPECT_NE(c.description.find("reserve 700 MiB (trunk 600 MiB + state 100 MiB), 128 MiB kept free"),
            std::string::npos)
      << c.description;
}

TEST(StreamBudget, AutomaticBudgetTooSmallSaysWhatToDo) {
  MemorySnapshot m;
  m.mem_available = 2 * kGiB + 240 * kMiB;  // 11.2 MiB left after reserve and headroom: 2 records of 4
  try {
    choose_expert_budget(request(std::nullopt), m);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--expert-cache SIZE"), std::string::npos) << e.what();
  }
}

TEST(StreamBudget, PrefillChunkShrinksToFitTheUnion) {
  EXPECT_EQ(max_prefill_chunk(1000, 4, 64, 512), 512);  // every expert of a layer fits
  EXPECT_EQ(max_prefill_chunk(40, 4, 64, 512), 10);     // 10 tokens x top-4 = 40 slots
  EXPECT_EQ(max_prefill_chunk(5, 4, 64, 512), 1);
  EXPECT_EQ(max_prefill_chunk(40, 4, 64, 6), 6);
}

}  // namespace
}  // namespace df::stream

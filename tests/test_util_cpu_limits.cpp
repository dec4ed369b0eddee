// The CPUs this process may use (util/cpu_limits.h): the affinity mask, lowered by a cgroup CPU quota (v2
// cpu.max, v1 cfs quota / period, the tightest on the way to the root), read from fake cgroup trees.
#include <gtest/gtest.h>
#include <sched.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "util/cpu_limits.h"

namespace df {
namespace {

namespace fs = std::filesystem;

class CpuLimitsTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::string(DF_TEST_TMP) + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_ + "/proc/self");
  }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(root_ + "/" + rel).parent_path());
    std::ofstream(root_ + "/" + rel) << text;
  }
  std::string root_;
};

int affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

TEST_F(CpuLimitsTree, NoQuotaLeavesTheAffinityMask) {
  write("proc/self/cgroup", "0::/user.slice\n");
  write("sys/fs/cgroup/user.slice/cpu.max", "max 100000\n");
  const CpuLimits l = read_cpu_limits(root_);
  EXPECT_FALSE(l.quota);
  EXPECT_EQ(l.affinity, affinity());
  EXPECT_EQ(l.usable(), affinity());
}

TEST_F(CpuLimitsTree, V2QuotaTheTightestOnTheWayUpRoundedUp) {
  write("proc/self/cgroup", "0::/a/b\n");
  write("sys/fs/cgroup/a/b/cpu.max", "max 100000\n");
  write("sys/fs/cgroup/a/cpu.max", "50000 100000\n");  // half a CPU
  write("sys/fs/cgroup/cpu.max", "400000 100000\n");
  const CpuLimits l = read_cpu_limits(root_);
  ASSERT_TRUE(l.quota);
  EXPECT_DOUBLE_EQ(*l.quota, 0.5);
  EXPECT_EQ(l.usable(), 1);
  EXPECT_NE(l.describe().find("quota 0.5"), std::string::npos) << l.describe();
}

TEST_F(CpuLimitsTree, V1CfsQuota) {
  write("proc/self/cgroup", "5:cpu,cpuacct:/job\n4:memory:/job\n");
  write("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us", "150000\n");
  write("sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
  write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  const CpuLimits l = read_cpu_limits(root_);
  ASSERT_TRUE(l.quota);
  EXPECT_DOUBLE_EQ(*l.quota, 1.5);
  EXPECT_EQ(l.usable(), std::min(2, affinity()));
}

TEST(CpuLimits, UsableIsTheSmallerAndAtLeastOne) {
  CpuLimits l;
  l.affinity = 16;
  l.quota = 3.2;
  EXPECT_EQ(l.usable(), 4);
  l.quota = 0.01;
  EXPECT_EQ(l.usable(), 1);
  l.affinity = 2;
  l.quota = 8;
  EXPECT_EQ(l.usable(), 2);
}

}  // namespace
}  // namespace df

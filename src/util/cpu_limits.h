#pragma once
// How many CPUs this process may use: the CPUs of its affinity mask, or fewer when a cgroup CPU quota
// (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, the tightest on the way up to the root) allows less.
// Threads beyond that only take turns on the same CPUs.
#include <optional>
#include <string>

namespace df {

struct CpuLimits {
  int affinity = 1;              // CPUs in sched_getaffinity's mask
  std::optional<double> quota;   // CPUs' worth of time per period the cgroup allows; absent: no quota
  int usable() const;            // min(affinity, quota rounded up), at least 1
  std::string describe() const;  // "2 CPUs in the affinity mask, cgroup quota 1.5 CPUs"
};

// root: "/" normally; tests pass a fake tree with proc/self/cgroup and sys/fs/cgroup/... (the affinity
// mask is always this process's).
CpuLimits read_cpu_limits(const std::string& root = "/");

}  // namespace df

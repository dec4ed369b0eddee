#pragma once
// Where this process sits in its cgroups, from /proc/self/cgroup: the cgroup v2 path (the "0::/..." line) and
// the path of one cgroup v1 controller. The memory budget (stream/cache_budget) and the CPU limits
// (util/cpu_limits) both read their limits below these paths.
#include <string>

namespace df {

struct CgroupPaths {
  std::string v2;  // empty: no v2 line
  std::string v1;  // the v1 hierarchy that lists `controller`; empty: none
};

// root: "/" normally; tests pass a fake tree holding proc/self/cgroup.
CgroupPaths read_cgroup_paths(const std::string& root, const std::string& controller);

}  // namespace df

#include "util/cpu_limits.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <thread>
#include <vector>

#include "util/cgroup_paths.h"

namespace df {
namespace {

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::vector<std::string> read_words(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> words;
  std::string w;
  while (in >> w) words.push_back(w);
  return words;
}

std::optional<double> to_number(const std::string& s) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// v2: "QUOTA PERIOD" or "max PERIOD".
std::optional<double> quota_v2(const std::string& dir) {
  const auto w = read_words(dir + "/cpu.max");
  if (w.size() != 2 || w[0] == "max") return std::nullopt;
  const auto q = to_number(w[0]), p = to_number(w[1]);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return *q / *p;
}

// v1: cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us.
std::optional<double> quota_v1(const std::string& dir) {
  const auto q = read_words(dir + "/cpu.cfs_quota_us"), p = read_words(dir + "/cpu.cfs_period_us");
  if (q.size() != 1 || p.size() != 1) return std::nullopt;
  const auto qn = to_number(q[0]), pn = to_number(p[0]);
  if (!qn || !pn || *qn <= 0 || *pn <= 0) return std::nullopt;
  return *qn / *pn;
}

// The tightest quota from the cgroup at `path` up to the root of the hierarchy mounted at `base`.
template <class Read>
std::optional<double> tightest(const std::string& base, std::string path, Read read) {
  std::optional<double> best;
  while (true) {
    const auto q = read(base + (path == "/" ? "" : path));
    if (q && (!best || *q < *best)) best = q;
    if (path.empty() || path == "/") break;
    const size_t slash = path.find_last_of('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return best;
}

}  // namespace

int CpuLimits::usable() const {
  int n = affinity;
  if (quota) n = std::min(n, static_cast<int>(std::ceil(*quota - 1e-9)));
  return std::max(n, 1);
}

std::string CpuLimits::describe() const {
  std::string s = fmt::format("{} CPU{} in the affinity mask", affinity, affinity == 1 ? "" : "s");
  if (quota) s += fmt::format(", cgroup CPU quota {:.3g}", *quota);
  return s;
}

CpuLimits read_cpu_limits(const std::string& root) {
  CpuLimits limits;
  limits.affinity = affinity_cpus();
  const CgroupPaths paths = read_cgroup_paths(root, "cpu");
  const std::string &v2 = paths.v2, &v1 = paths.v1;
  const std::string cg = root + "/sys/fs/cgroup";
  std::optional<double> quota;
  if (!v2.empty() || std::ifstream(cg + "/cpu.max")) quota = tightest(cg, v2.empty() ? "/" : v2, quota_v2);
  if (!quota)
    for (const char* mount : {"/cpu,cpuacct", "/cpu"}) {
      quota = tightest(cg + mount, v1.empty() ? "/" : v1, quota_v1);
      if (quota) break;
    }
  limits.quota = quota;
  return limits;
}

}  // namespace df

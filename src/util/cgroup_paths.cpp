#include "util/cgroup_paths.h"

#include <fstream>
#include <sstream>

namespace df {

CgroupPaths read_cgroup_paths(const std::string& root, const std::string& controller) {
  CgroupPaths paths;
  std::ifstream in(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {  // "hierarchy-id:controller,controller:path"
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) paths.v2 = path;
    std::istringstream list(controllers);
    std::string c;
    while (std::getline(list, c, ','))
      if (c == controller) paths.v1 = path;
  }
  return paths;
}

}  // namespace df

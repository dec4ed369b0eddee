#include "backend/cuda/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace df::backend::cuda {

std::string OpKey::str() const {
  std::string s = op;
  if (type) {
    s += ' ';
    s += type;
    s += ' ' + std::to_string(n_out) + 'x' + std::to_string(n_in);
  }
  if (rows > 0) s += " rows " + std::to_string(rows <= 8 ? rows : rows <= 64 ? 64 : 512);
  return s;
}

OpProfile::OpProfile() {
  const char* v = std::getenv("DF_CUDA_PROFILE");
  on_ = v && *v && *v != '0';
}

void OpProfile::add(const std::string& key, double seconds) {
  Total& t = totals_[key];
  t.seconds += seconds;
  ++t.calls;
}

OpProfile::~OpProfile() {
  if (!on_ || totals_.empty()) return;
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double all = 0;
  for (const auto& r : rows) all += r.second.seconds;
  std::fprintf(stderr, "cuda op profile (each op synchronised): %.3f s in all\n", all);
  for (const auto& [key, t] : rows)
    std::fprintf(stderr, "  %6.2f%% %9.3f ms %8llu calls %8.2f us/call  %s\n", 100.0 * t.seconds / all,
                 t.seconds * 1e3, static_cast<unsigned long long>(t.calls), t.seconds * 1e6 / double(t.calls),
                 key.c_str());
}

}  // namespace df::backend::cuda

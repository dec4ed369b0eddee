#include "util/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace df {

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

OpProfile::OpProfile(const char* env, const char* title) : title_(title) {
  const char* v = std::getenv(env);
  on_ = v && *v && *v != '0';
}

void OpProfile::add(const std::string& key, double seconds, const PoolTimes& pool, int threads) {
  Total& t = totals_[key];
  t.seconds += seconds;
  t.pool.busy += pool.busy;
  t.pool.start += pool.start;
  t.pool.tail += pool.tail;
  t.pool.absent += pool.absent;
  t.capacity += seconds * threads;
  ++t.calls;
}

OpProfile::~OpProfile() {
  if (!on_ || totals_.empty()) return;
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double all = 0;
  bool pooled = false;
  for (const auto& r : rows) {
    all += r.second.seconds;
    pooled = pooled || r.second.capacity > 0;
  }
  const double span = last_end_ - first_start_;
  std::fprintf(stderr, "%s: %.3f s in ops, %.3f s (%.1f%%) between them from the first op to the last%s\n",
               title_.c_str(), all, span - all, span > 0 ? 100.0 * (span - all) / span : 0.0,
               pooled ? " (shares of the pool's threads x wall time: in tasks, before the first task of a "
                        "job, after the last, in jobs without a task)"
                      : "");
  for (const auto& [key, t] : rows) {
    std::fprintf(stderr, "  %6.2f%% %9.3f ms %8llu calls %8.2f us/call", 100.0 * t.seconds / all,
                 t.seconds * 1e3, static_cast<unsigned long long>(t.calls),
                 t.seconds * 1e6 / double(t.calls));
    if (pooled) {
      const double c = t.capacity > 0 ? 100.0 / t.capacity : 0.0;
      std::fprintf(stderr, "  busy %5.1f%% start %4.1f%% tail %4.1f%% absent %4.1f%%", t.pool.busy * c,
                   t.pool.start * c, t.pool.tail * c, t.pool.absent * c);
    }
    std::fprintf(stderr, "  %s\n", key.c_str());
  }
}

}  // namespace df

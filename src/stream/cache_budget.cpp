#include "stream/cache_budget.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "stream/byte_size.h"
#include "util/cgroup_paths.h"
#include "util/error.h"

namespace df::stream {
namespace {

// cgroup v1 writes "unlimited" as a page-rounded INT64_MAX; anything this large means no limit.
constexpr uint64_t kUnlimitedAbove = uint64_t{1} << 60;

std::optional<uint64_t> read_number_file(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  try {
    size_t used = 0;
    const uint64_t v = std::stoull(word, &used);
    if (used != word.size() || v >= kUnlimitedAbove) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

uint64_t read_mem_available(const std::string& root) {
  const std::string path = root + "/proc/meminfo";
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  fail("{}: no MemAvailable line; pass --expert-cache SIZE to choose the cache size yourself", path);
}

// Walks from the process's cgroup up to the root, keeping the limit that leaves the least room.
void apply_cgroup(const std::string& base, std::string path, const char* limit_file, const char* usage_file,
                  MemorySnapshot& snap) {
  std::optional<uint64_t> best_room;
  while (true) {
    const std::string dir = base + (path == "/" ? "" : path);
    const auto limit = read_number_file(dir + "/" + limit_file);
    if (limit) {
      const uint64_t usage = read_number_file(dir + "/" + usage_file).value_or(0);
      const uint64_t room = *limit > usage ? *limit - usage : 0;
      if (!best_room || room < *best_room) {
        best_room = room;
        snap.cgroup_limit = limit;
        snap.cgroup_usage = usage;
      }
    }
    if (path.empty() || path == "/") break;
    const size_t slash = path.find_last_of('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

}  // namespace

uint64_t MemorySnapshot::usable() const {
  if (!cgroup_limit) return mem_available;
  const uint64_t room = *cgroup_limit > cgroup_usage ? *cgroup_limit - cgroup_usage : 0;
  return std::min(mem_available, room);
}

MemorySnapshot read_memory_snapshot(const std::string& root) {
  MemorySnapshot snap;
  snap.mem_available = read_mem_available(root);
  const CgroupPaths paths = read_cgroup_paths(root, "memory");
  const std::string &v2 = paths.v2, &v1 = paths.v1;
  const std::string cg = root + "/sys/fs/cgroup";
  if (!v2.empty() || std::ifstream(cg + "/memory.max"))
    apply_cgroup(cg, v2.empty() ? "/" : v2, "memory.max", "memory.current", snap);
  if (!snap.cgroup_limit)
    apply_cgroup(cg + "/memory", v1.empty() ? "/" : v1, "memory.limit_in_bytes", "memory.usage_in_bytes",
                 snap);
  return snap;
}

BudgetChoice choose_expert_budget(const BudgetRequest& r, const MemorySnapshot& memory) {
  if (r.record_bytes == 0 || r.total_records == 0) fail("expert cache: the store has no expert records");
  const uint64_t min_records = std::max<uint64_t>(r.min_records, 1);
  const uint64_t min_bytes = min_records * r.record_bytes;
  BudgetChoice choice;
  if (r.explicit_bytes) {
    const uint64_t slots = std::min(*r.explicit_bytes / r.record_bytes, r.total_records);
    if (slots < min_records)
      fail(
          "--expert-cache {}: holds {} expert records of {}, but one layer needs {} at once; the minimum is "
          "{}",
          format_bytes(*r.explicit_bytes), slots, format_bytes(r.record_bytes), min_records,
          format_bytes(min_bytes));
    choice.slots = slots;
    choice.description = fmt::format("expert cache {} ({} of {} records of {}, --expert-cache {})",
                                     format_bytes(slots * r.record_bytes), slots, r.total_records,
                                     format_bytes(r.record_bytes), format_bytes(*r.explicit_bytes));
  } else {
    const uint64_t usable = memory.usable();
    // Headroom for what nobody counted (allocator slack, page tables, the page cache a cgroup charges): a
    // tenth, at least 128 MiB. The reserve is computed (engine/memory_plan.h), not estimated, and counts
    // thread stacks in full; on lfm2-24b the cgroup peak stayed 248 MiB below a 1 GiB limit with this
    // (docs/PERF.md).
    const uint64_t headroom = std::max<uint64_t>(uint64_t{128} << 20, usable / 10);
    const uint64_t taken = r.reserve_bytes + headroom;
    const uint64_t left = usable > taken ? usable - taken : 0;
    const uint64_t slots = std::min(left / r.record_bytes, r.total_records);
    const std::string reserved =
        r.reserve_description.empty()
            ? format_bytes(r.reserve_bytes)
            : fmt::format("{} ({})", format_bytes(r.reserve_bytes), r.reserve_description);
    if (slots < min_records)
      fail(
          "expert cache: only {} of memory is usable ({}), {} is reserved for the rest of the run and {} "
          "kept free, which leaves {}; the cache needs at least {} ({} records of {}). Free memory, lower "
          "the "
          "context size (-c) or pass --expert-cache SIZE",
          format_bytes(usable), memory.cgroup_limit ? "MemAvailable and the cgroup limit" : "MemAvailable",
          reserved, format_bytes(headroom), format_bytes(left), format_bytes(min_bytes), min_records,
          format_bytes(r.record_bytes));
    choice.slots = slots;
    choice.automatic = true;
    choice.description =
        fmt::format("expert cache {} ({} of {} records of {}; auto: {} usable, reserve {}, {} kept free)",
                    format_bytes(slots * r.record_bytes), slots, r.total_records,
                    format_bytes(r.record_bytes), format_bytes(usable), reserved, format_bytes(headroom));
  }
  choice.bytes = choice.slots * r.record_bytes;
  return choice;
}

int max_prefill_chunk(uint64_t slots, int top_k, int n_expert, int wanted) {
  if (wanted <= 1 || top_k <= 0) return 1;
  if (static_cast<uint64_t>(n_expert) <= slots) return wanted;  // any chunk's union fits
  const uint64_t fit = slots / static_cast<uint64_t>(top_k);
  return static_cast<int>(std::clamp<uint64_t>(fit, 1, static_cast<uint64_t>(wanted)));
}

}  // namespace df::stream

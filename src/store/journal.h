#pragma once
// STORE/ingest.partial: what an interrupted ingest had durably written. It is rewritten (temporary name,
// fsync, rename) after experts.bin.partial was fdatasync'ed, so every record it counts is on disk; the next
// ingest re-checks those records against the listed checksums before it trusts them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "store/manifest.h"

namespace df::store {

struct Journal {
  SourceInfo source;
  Json layout;  // layout_to_json() of the plan being written; a different plan means "restart"
  uint64_t records_done = 0;
  std::vector<uint64_t> checksums;  // one per record done, in record order
};

void write_journal(const std::string& dir, const Journal& j);
// nullopt when there is no journal or it cannot be read (then the ingest restarts).
std::optional<Journal> read_journal(const std::string& dir);

}  // namespace df::store

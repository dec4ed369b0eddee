#include "store/journal.h"

#include <filesystem>
#include <fstream>

#include "util/atomic_file.h"
#include "util/error.h"

namespace df::store {

namespace {
constexpr const char* kJournalFormat = "diskformer-ingest-journal";
}

void write_journal(const std::string& dir, const Journal& j) {
  Json out;
  out["format"] = kJournalFormat;
  out["format_version"] = kFormatVersion;
  out["source"] = source_to_json(j.source);
  out["layout"] = j.layout;
  out["records_done"] = j.records_done;
  Json sums = Json::array();
  for (uint64_t c : j.checksums) sums.push_back(hex64(c));
  out["xxh3"] = std::move(sums);
  std::string text = out.dump() + "\n";
  AtomicFile f((std::filesystem::path(dir) / kJournalFile).string());
  f.write(text.data(), text.size());
  f.commit();
}

std::optional<Journal> read_journal(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / kJournalFile);
  if (!in) return std::nullopt;
  try {
    Json j = Json::parse(in);
    if (json_string(j, "format", "") != kJournalFormat || json_i64(j, "format_version", "") != kFormatVersion)
      return std::nullopt;
    Journal out;
    out.source = source_from_json(json_field(j, "source", ""), "source");
    out.layout = json_field(j, "layout", "");
    out.records_done = json_u64(j, "records_done", "");
    const Json& sums = json_field(j, "xxh3", "");
    if (!sums.is_array() || sums.size() != out.records_done) return std::nullopt;
    for (size_t i = 0; i < sums.size(); ++i) out.checksums.push_back(json_hex64(sums[i], "xxh3"));
    return out;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace df::store

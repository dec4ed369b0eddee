#include "hub/local_models.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "hub/download.h"
#include "hub/names.h"
#include "store/manifest.h"
#include "store/store.h"
#include "util/error.h"

namespace df::hub {

namespace {

namespace fs = std::filesystem;

uint64_t bytes_on_disk(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec)) n += it->file_size(ec);
  return n;
}

bool is_hex16(const std::string& s) {
  return s.size() == 16 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string store_state(const std::string& dir, const std::string& sha256, bool& ready) {
  ready = false;
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / store::kManifestFile, ec)) return "not ingested";
  try {
    const store::Store s = store::Store::open(dir);
    if (!sha256.empty() && s.source().sha256 != sha256) return "damaged: the store is of another file";
    ready = true;
    return "ready";
  } catch (const Error& e) {
    return "damaged: " + std::string(e.what()).substr(0, 120);
  }
}

LocalModel describe_pulled(const fs::path& dir) {
  LocalModel m;
  m.name = dir.filename().string();
  m.dir = dir.string();
  m.bytes = bytes_on_disk(m.dir);
  try {
    m.record = read_record(m.dir);
  } catch (const Error& e) {
    m.state = std::string("damaged: ") + e.what();
    m.source = "?";
    return m;
  }
  const PullRecord& r = *m.record;
  m.source = r.repo + "/" + r.file;
  m.state = store_state(m.dir, r.sha256, m.ready);
  if (!m.ready) {
    const std::string gguf = (dir / fs::path(r.file).filename()).string();
    std::error_code ec;
    const uint64_t part = fs::file_size(part_path_of(gguf), ec);
    if (!ec && r.size > 0)
      m.state = fmt::format("downloaded {}%", part * 100 / r.size);  // resumed by the next pull
    else if (fs::exists(gguf, ec))
      m.state = "downloaded, not ingested";
  }
  return m;
}

LocalModel describe_ingested(const fs::path& dir) {
  LocalModel m;
  m.name = dir.filename().string();
  m.dir = dir.string();
  m.bytes = bytes_on_disk(m.dir);
  m.state = store_state(m.dir, {}, m.ready);
  try {
    std::error_code ec;
    const auto size = fs::file_size(dir / store::kManifestFile, ec);
    if (!ec && size < (64u << 20)) {
      std::string text(size, '\0');
      FILE* f = std::fopen((dir / store::kManifestFile).c_str(), "rb");
      if (f) {
        text.resize(std::fread(text.data(), 1, text.size(), f));
        std::fclose(f);
      }
      const store::SourceInfo s = store::peek_manifest_source(text);
      m.source = s.name.empty() ? "?" : "ingested from " + s.name;
    }
  } catch (const std::exception&) {
    m.source = "?";
  }
  if (m.source.empty()) m.source = "?";
  return m;
}

// A pulled record is what `ref` asks for: repository, revision and file (by name or quant tag).
bool record_matches(const PullRecord& r, const ModelRef& ref) {
  if (to_lower(r.repo) != to_lower(ref.repo)) return false;
  if (ref.revision != r.revision && ref.revision != r.commit) return false;
  if (ref.pin && (r.sha256 != ref.pin->sha256 || r.size != ref.pin->size)) return false;
  if (!ref.selector.file.empty()) return r.file == ref.selector.file;
  return ref.selector.quant.empty() || matches_quant(r.file, ref.selector.quant);
}

std::vector<std::string> names_of(const std::vector<LocalModel>& v) {
  std::vector<std::string> names;
  for (const auto& m : v) names.push_back("  " + m.name + "  (" + m.source + ")");
  return names;
}

}  // namespace

std::vector<LocalModel> list_local_models(const std::string& cache_root) {
  std::vector<LocalModel> out;
  std::error_code ec;
  const fs::path models = models_dir(cache_root);
  for (auto it = fs::directory_iterator(models, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->is_directory(ec) && fs::exists(it->path() / kRecordFile, ec))
      out.push_back(describe_pulled(it->path()));
  for (auto it = fs::directory_iterator(cache_root, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    if (it->is_directory(ec) && is_hex16(it->path().filename().string()) &&
        fs::exists(it->path() / store::kManifestFile, ec))
      out.push_back(describe_ingested(it->path()));
  std::sort(out.begin(), out.end(), [](const LocalModel& a, const LocalModel& b) { return a.name < b.name; });
  return out;
}

LocalModel find_local_model(const std::string& cache_root, const std::string& name) {
  const std::vector<LocalModel> all = list_local_models(cache_root);
  for (const LocalModel& m : all)
    if (m.name == name) return m;
  std::vector<LocalModel> matches;
  std::optional<ModelRef> ref;
  try {
    ref = parse_model_ref(name);
  } catch (const Error&) {
  }
  if (ref)
    for (const LocalModel& m : all)
      if (m.record && to_lower(m.record->repo) == to_lower(ref->repo) &&
          (ref->selector.file.empty()
               ? ref->selector.quant.empty() || matches_quant(m.record->file, ref->selector.quant)
               : m.record->file == ref->selector.file))
        matches.push_back(m);
  if (matches.size() == 1) return matches.front();
  if (matches.size() > 1)
    fail("'{}' names {} models; name one:\n{}", name, matches.size(), fmt::join(names_of(matches), "\n"));
  if (all.empty()) fail("no model '{}': there are no models in {}", name, cache_root);
  fail("no model '{}'; `diskformer list` shows these:\n{}", name, fmt::join(names_of(all), "\n"));
}

uint64_t remove_local_model(const LocalModel& model) {
  std::error_code ec;
  if (!fs::is_directory(model.dir, ec)) fail("'{}' is not a directory", model.dir);
  {
    EntryLock lock(model.dir, /*wait=*/false);
    // The records and the data go first, the lock file last: a crash in between leaves a directory that
    // `list` no longer shows as a model.
    for (auto it = fs::directory_iterator(model.dir, ec); !ec && it != fs::directory_iterator();
         it.increment(ec))
      if (it->path().filename() != kLockFile) {
        fs::remove_all(it->path(), ec);
        if (ec) fail("cannot remove '{}': {}", it->path().string(), ec.message());
      }
  }
  fs::remove_all(model.dir, ec);
  if (ec) fail("cannot remove '{}': {}", model.dir, ec.message());
  return model.bytes;
}

std::optional<LocalModel> find_pulled(const std::string& cache_root, const ModelRef& ref) {
  std::vector<LocalModel> found;
  for (LocalModel& m : list_local_models(cache_root))
    if (m.ready && m.record && m.record->complete && record_matches(*m.record, ref))
      found.push_back(std::move(m));
  if (found.size() != 1) return std::nullopt;
  return found.front();
}

}  // namespace df::hub

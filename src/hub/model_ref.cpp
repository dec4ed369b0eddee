#include "hub/model_ref.h"

#include "hub/names.h"
#include "util/error.h"

namespace df::hub {

namespace {

bool pin_covers(const KnownModel& k, const ModelRef& r) {
  if (to_lower(k.repo) != to_lower(r.repo)) return false;
  if (!r.selector.file.empty()) return r.selector.file == k.file;
  return r.selector.quant.empty() || matches_quant(k.file, r.selector.quant);
}

}  // namespace

ModelRef parse_model_ref(std::string_view spec, std::string_view revision) {
  if (spec.empty()) fail("no model named: give ORG/NAME[:QUANT], ORG/NAME/FILE.gguf or a known model's name");
  if (!revision.empty()) check_revision(revision);
  ModelRef r;
  r.spec = std::string(spec);
  if (const KnownModel* k = find_known_model(spec)) {
    r.repo = std::string(k->repo);
    r.selector.file = std::string(k->file);
  } else {
    const size_t slash = spec.find('/');
    if (slash == std::string_view::npos) {
      std::string known;
      for (const KnownModel& k : known_models()) known += (known.empty() ? "" : ", ") + std::string(k.alias);
      fail("'{}' is neither a known model ({}) nor a Hugging Face repository ORG/NAME[:QUANT]", spec, known);
    }
    const size_t file_slash = spec.find('/', slash + 1);
    std::string_view repo = spec.substr(0, file_slash);
    if (file_slash != std::string_view::npos) {
      r.selector.file = std::string(spec.substr(file_slash + 1));
      check_repo_file(r.selector.file);
    } else if (const size_t colon = repo.find(':'); colon != std::string_view::npos) {
      r.selector.quant = std::string(repo.substr(colon + 1));
      repo = repo.substr(0, colon);
      if (r.selector.quant.empty() || r.selector.quant.size() > 64 || !is_safe_repo_file(r.selector.quant) ||
          r.selector.quant.find('/') != std::string::npos)
        fail("'{}': the quant tag after ':' must be a name such as Q4_0 or Q4_K_M", spec);
    }
    r.repo = std::string(repo);
    check_repo_name(r.repo);
  }
  for (const KnownModel& k : known_models())
    if (pin_covers(k, r) && (revision.empty() || revision == k.revision)) {
      r.pin = &k;
      r.repo = std::string(k.repo);
      r.selector = FileSelector{std::string(k.file), {}};
      break;
    }
  r.revision = !revision.empty() ? std::string(revision) : r.pin ? std::string(r.pin->revision) : "main";
  return r;
}

}  // namespace df::hub

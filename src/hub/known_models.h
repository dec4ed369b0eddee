#pragma once
// Models diskformer knows by a short name, each pinned to one file of one commit with its sha256 and size,
// so that `diskformer pull lfm2.5-24b` needs no repository name and always gets the same bytes.
#include <cstdint>
#include <span>
#include <string_view>

namespace df::hub {

struct KnownModel {
  std::string_view alias;  // what `pull` and `-hf` accept, case-insensitive
  std::string_view repo, file, revision, sha256;
  uint64_t size = 0;
  std::string_view description;
};

std::span<const KnownModel> known_models();
const KnownModel* find_known_model(std::string_view alias);

}  // namespace df::hub

#pragma once
// Which GGUF of a repository a name asks for: `REPO/FILE` names it, `REPO:QUANT` picks it by its quant tag,
// `REPO` alone takes the only model file there is. Several matches are an error that lists them.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hub/hf_listing.h"

namespace df::hub {

// Case-insensitive: the tag appears in the file's name (without ".gguf") between separators ('-', '.', the
// start or the end), so Q4_0 matches "LFM2.5-24B-A2B-QAD-Q4_0.gguf" and "m.Q4_0.gguf" but not
// "m-Q4_0_4_4.gguf", and Q4_K not "m-Q4_K_M.gguf".
bool matches_quant(std::string_view file, std::string_view quant);

// "NAME-00001-of-00003.gguf" -> 3; 0 for a file that is not part of a split GGUF.
int split_part_count(std::string_view file);

struct FileSelector {
  std::string file;   // exact repository path; or
  std::string quant;  // quant tag; both empty: the repository's only model GGUF
};

// The chosen file of `listing` of `repo` at `revision` (df::Error when none, several, or a split GGUF match).
const RepoFile& choose_file(const RepoListing& listing, const FileSelector& selector, const std::string& repo,
                            const std::string& revision);

}  // namespace df::hub

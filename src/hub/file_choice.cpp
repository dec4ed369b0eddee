#include "hub/file_choice.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hub/names.h"
#include "util/error.h"

namespace df::hub {

namespace {

std::string_view base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool is_gguf(std::string_view path) { return to_lower(path).ends_with(".gguf"); }

// Vision projectors and other helpers sit beside the model files in many GGUF repositories.
bool is_model_gguf(std::string_view path) {
  return is_gguf(path) && !to_lower(base_name(path)).starts_with("mmproj");
}

bool is_separator(char c) { return c == '-' || c == '.'; }

std::string list_of(const std::vector<const RepoFile*>& files) {
  std::vector<std::string> names;
  for (const RepoFile* f : files) names.push_back("  " + f->path);
  return fmt::format("{}", fmt::join(names, "\n"));
}

[[noreturn]] void refuse_split(const RepoFile& f, const std::string& what) {
  fail(
      "{}: '{}' is one part of a GGUF split into {} files; diskformer reads single-file GGUFs only (join the "
      "parts with llama.cpp's `llama-gguf-split --merge` and run the result with -m)",
      what, f.path, split_part_count(f.path));
}

}  // namespace

bool matches_quant(std::string_view file, std::string_view quant) {
  if (quant.empty()) return false;
  std::string stem = to_lower(base_name(file));
  if (stem.ends_with(".gguf")) stem.resize(stem.size() - 5);
  const int parts = split_part_count(file);
  if (parts > 0) stem.resize(stem.size() - std::string_view("-00001-of-00001").size());
  const std::string tag = to_lower(quant);
  for (size_t at = stem.find(tag); at != std::string::npos; at = stem.find(tag, at + 1)) {
    const size_t end = at + tag.size();
    if ((at == 0 || is_separator(stem[at - 1])) && (end == stem.size() || is_separator(stem[end])))
      return true;
  }
  return false;
}

int split_part_count(std::string_view file) {
  // "-NNNNN-of-MMMMM.gguf": 20 characters before the end.
  const std::string lower = to_lower(file);
  if (lower.size() < 20 || !lower.ends_with(".gguf")) return 0;
  const std::string_view tail = std::string_view(lower).substr(lower.size() - 20, 15);
  auto digits = [](std::string_view s) {
    for (char c : s)
      if (c < '0' || c > '9') return false;
    return true;
  };
  if (tail[0] != '-' || !digits(tail.substr(1, 5)) || tail.substr(6, 4) != "-of-" ||
      !digits(tail.substr(10, 5)))
    return 0;
  return std::stoi(std::string(tail.substr(10, 5)));
}

const RepoFile& choose_file(const RepoListing& listing, const FileSelector& selector, const std::string& repo,
                            const std::string& revision) {
  const std::string what = fmt::format("{} at {}", repo, revision);
  if (!selector.file.empty()) {
    const RepoFile* f = listing.find(selector.file);
    if (!f) {
      std::vector<const RepoFile*> ggufs;
      for (const RepoFile& g : listing.files)
        if (is_gguf(g.path)) ggufs.push_back(&g);
      fail("{} has no file '{}'{}{}", what, selector.file, ggufs.empty() ? "" : "; its GGUF files:\n",
           list_of(ggufs));
    }
    if (!is_gguf(f->path)) fail("{}: '{}' is not a GGUF file", what, f->path);
    if (split_part_count(f->path) > 0) refuse_split(*f, what);
    return *f;
  }
  std::vector<const RepoFile*> all, matches;
  for (const RepoFile& f : listing.files) {
    if (!is_model_gguf(f.path)) continue;
    all.push_back(&f);
    if (selector.quant.empty() || matches_quant(f.path, selector.quant)) matches.push_back(&f);
  }
  if (all.empty()) fail("{} has no GGUF files", what);
  if (matches.empty())
    fail("{} has no GGUF file with the quant tag '{}'; its GGUF files:\n{}", what, selector.quant,
         list_of(all));
  // The parts of one split GGUF are one candidate.
  bool all_parts_of_one_split = split_part_count(matches.front()->path) > 0;
  for (const RepoFile* f : matches)
    all_parts_of_one_split = all_parts_of_one_split && split_part_count(f->path) > 0 &&
                             f->path.substr(0, f->path.size() - 20) ==
                                 matches.front()->path.substr(0, matches.front()->path.size() - 20);
  if (all_parts_of_one_split) refuse_split(*matches.front(), what);
  if (matches.size() > 1)
    fail("{}: {} GGUF files match{}:\n{}\nname one of them as {}/FILE", what, matches.size(),
         selector.quant.empty() ? "" : fmt::format(" the quant tag '{}'", selector.quant), list_of(matches),
         repo);
  if (split_part_count(matches.front()->path) > 0) refuse_split(*matches.front(), what);
  return *matches.front();
}

}  // namespace df::hub

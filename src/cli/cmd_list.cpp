// `diskformer list`: the models on this machine (hub/local_models.h): pulled ones with their source, commit
// and last use, downloads in progress, and the stores that `-m FILE.gguf` made.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <ctime>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "hub/known_models.h"
#include "hub/local_models.h"
#include "store/progress.h"
#include "store/source_id.h"

namespace df::cli {

namespace {

std::string date_text(int64_t t) {
  if (t <= 0) return "never";
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  if (!::localtime_r(&tt, &tm)) return "?";
  char buf[32];
  return std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm) ? buf : "?";
}

void run_list() {
  const std::string root = store::default_cache_root();
  const auto models = hub::list_local_models(root);
  if (models.empty()) {
    fmt::print("no models in {}; get one with `diskformer pull {}`\n", root, hub::known_models()[0].alias);
    return;
  }
  size_t w = 4;
  for (const auto& m : models) w = std::max(w, m.name.size());
  fmt::print("{:<{}}  {:>10}  {:<24}  {:<12}  {:<16}  {}\n", "NAME", w, "SIZE", "STATE", "REVISION",
             "LAST USED", "SOURCE", w);
  for (const auto& m : models) {
    const std::string rev = m.record ? m.record->commit.substr(0, 12) : "-";
    const std::string used = m.record ? date_text(m.record->last_used) : "-";
    fmt::print("{:<{}}  {:>10}  {:<24}  {:<12}  {:<16}  {}\n", m.name, w, store::format_bytes(m.bytes),
               m.state, rev, used, m.source);
  }
}

}  // namespace

void register_list(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "list", "The models on this machine: pulled ones, downloads in progress, stores made from GGUF files");
  cmd->callback([] { run_list(); });
}

}  // namespace df::cli

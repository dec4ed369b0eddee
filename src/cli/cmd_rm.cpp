// `diskformer rm NAME`: removes a pulled model (its store, download and record) or a store that
// `-m FILE.gguf` made, by the name `diskformer list` shows (or ORG/NAME[:QUANT|/FILE], a known model's name).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "hub/local_models.h"
#include "store/progress.h"
#include "store/source_id.h"

namespace df::cli {

void register_rm(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("rm", "Remove a model that `diskformer list` shows");
  cmd->add_option("NAME", *name, "the model's name in `diskformer list`, or ORG/NAME[:QUANT|/FILE]")
      ->required();
  cmd->callback([name] {
    const hub::LocalModel m = hub::find_local_model(store::default_cache_root(), *name);
    const uint64_t freed = hub::remove_local_model(m);
    fmt::print("removed {} ({}, {} freed)\n", m.name, m.dir, store::format_bytes(freed));
  });
}

}  // namespace df::cli

#pragma once
// The hub flags of pull and of -hf on run, chat and bench, and the options a command-line pull runs with:
// progress on stderr (pull_progress.h), notes on stderr, Ctrl-C keeps the download for the next run.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/pull_progress.h"
#include "hub/pull.h"

namespace df::cli {

struct HubFlags {
  std::string endpoint;  // --hf-endpoint
  void add(CLI::App* app);
};

hub::PullOptions pull_options(const HubFlags& flags, PullProgress& progress);

}  // namespace df::cli

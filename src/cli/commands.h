#pragma once
// Each subcommand lives in its own file and registers itself on the app; main.cpp only lists them.
#include <CLI/CLI.hpp>

namespace df::cli {

void register_inspect(CLI::App& app);
void register_make_model(CLI::App& app);
void register_run(CLI::App& app);
void register_chat(CLI::App& app);
void register_ingest(CLI::App& app);
void register_verify(CLI::App& app);
void register_bench(CLI::App& app);
void register_replay(CLI::App& app);
void register_pull(CLI::App& app);
void register_list(CLI::App& app);
void register_rm(CLI::App& app);
void register_serve(CLI::App& app);

}  // namespace df::cli

#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"diskformer: run Mixture-of-Experts models larger than memory, experts streamed from disk"};
  app.require_subcommand(1);
  df::cli::register_inspect(app);
  df::cli::register_make_model(app);
  df::cli::register_run(app);
  df::cli::register_chat(app);
  df::cli::register_ingest(app);
  df::cli::register_verify(app);
  df::cli::register_bench(app);
  df::cli::register_replay(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const df::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  return 0;
}

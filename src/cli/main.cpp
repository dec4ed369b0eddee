#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

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
  df::cli::register_pull(app);
  df::cli::register_list(app);
  df::cli::register_rm(app);
  df::cli::register_serve(app);
  // llama.cpp spells the hub option "-hf", a one-dash name of two letters that CLI11 would read as -h -f.
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args) {
    if (a == "--") break;
    if (a == "-hf") a = "--hf-repo";
    if (a == "-np") a = "--parallel";  // llama-server's spelling, the same trap
    if (a == "-ts") a = "--tensor-split";
    if (a == "-sm") a = "--split-mode";
  }
  std::vector<const char*> arg_ptrs;
  for (const std::string& a : args) arg_ptrs.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const df::Interrupted& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 130;
  } catch (const df::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  return 0;
}

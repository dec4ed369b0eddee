// `diskformer ingest MODEL.gguf [-o STORE] [--force]`: build the expert store of a MoE GGUF (store/ingest.h).
// A progress bar with bytes/s and the time left is drawn on stderr when it is a terminal.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "store/ingest.h"
#include "store/progress.h"

namespace df::cli {

namespace {

struct IngestArgs {
  std::string model, output;
  bool force = false;
};

double rate(uint64_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0; }

void run_ingest(const IngestArgs& args) {
  store::TerminalProgress bar;
  store::IngestOptions opt;
  opt.output_dir = args.output;
  opt.force = args.force;
  opt.progress = bar.fn();
  opt.on_message = [&](const std::string& text) {
    bar.finish();
    fmt::print(stderr, "note: {}\n", text);
  };
  store::IngestResult r = store::ingest(args.model, opt);
  bar.finish();
  const store::Layout& L = r.layout;
  if (r.already_complete) {
    fmt::print(
        "store {} is already complete for {} (`diskformer verify {}` checks every record; --force "
        "rebuilds)\n",
        r.dir, r.source.name, r.dir);
    return;
  }
  fmt::print("store {}\n", r.dir);
  fmt::print("  source      {} ({}, sha256 {})\n", r.source.name, store::format_bytes(r.source.size),
             r.source.sha256);
  fmt::print("  experts.bin {} MoE layers x {} experts, records of {} = {}\n", L.n_moe_layers, L.n_expert,
             store::format_bytes(L.record_bytes), store::format_bytes(r.experts_bytes));
  fmt::print("  dense.bin   {}\n", store::format_bytes(r.dense_bytes));
  if (r.records_reused > 0)
    fmt::print("  resumed     {} records kept from the interrupted ingest\n", r.records_reused);
  fmt::print("  time        hash {:.1f} s, experts {:.1f} s ({}/s), dense {:.1f} s\n", r.hash_seconds,
             r.experts_seconds,
             store::format_bytes(static_cast<uint64_t>(rate(r.experts_bytes, r.experts_seconds))),
             r.dense_seconds);
}

}  // namespace

void register_ingest(CLI::App& app) {
  auto args = std::make_shared<IngestArgs>();
  CLI::App* cmd = app.add_subcommand(
      "ingest",
      "Build the expert store of a MoE GGUF: experts.bin (one 4096-aligned record per expert), dense.bin, "
      "manifest.json");
  cmd->add_option("MODEL", args->model, "the .gguf file")->required()->check(CLI::ExistingFile);
  cmd->add_option(
      "-o,--output", args->output,
      "store directory (default: $XDG_CACHE_HOME/diskformer/<first 16 hex digits of the sha256>)");
  cmd->add_flag("--force", args->force, "rebuild even if the directory already holds a complete store");
  cmd->callback([args] { run_ingest(*args); });
}

}  // namespace df::cli

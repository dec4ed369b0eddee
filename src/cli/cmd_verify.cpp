// `diskformer verify STORE [--source MODEL.gguf]`: open the store (manifest, sizes, dense.bin header), then
// check the xxh3 of every expert record and dense tensor; with --source also that the store was made from
// that file. Exit 0 with a summary, or an error naming the first damaged record.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "store/progress.h"
#include "store/source_id.h"
#include "store/store.h"

namespace df::cli {

namespace {

struct VerifyArgs {
  std::string dir, source;
};

void run_verify(const VerifyArgs& args) {
  auto t0 = std::chrono::steady_clock::now();
  store::Store s = store::Store::open(args.dir);
  store::TerminalProgress bar;
  if (!args.source.empty()) {
    store::SourceInfo actual;
    actual.name = std::filesystem::path(args.source).filename().string();
    actual.size = store::stamp_of(args.source).size;
    actual.sha256 = store::sha256_file(args.source, bar.fn());
    s.check_source(actual);
  }
  uint64_t bytes = s.verify(bar.fn());
  bar.finish();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const store::Layout& L = s.layout();
  fmt::print(
      "store {}: OK: {} records ({} MoE layers x {} experts) and {} dense tensors match their checksums, {} "
      "checked in {:.1f} s{}\n",
      s.dir(), L.n_records(), L.n_moe_layers, L.n_expert, s.dense_checksums().size(),
      store::format_bytes(bytes), seconds,
      args.source.empty() ? "" : fmt::format("; made from {}", s.source().name));
}

}  // namespace

void register_verify(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand("verify", "Check every checksum of an expert store");
  cmd->add_option("STORE", args->dir, "the store directory")->required();
  cmd->add_option("--source", args->source, "also check that the store was made from this .gguf (sha256)")
      ->check(CLI::ExistingFile);
  cmd->callback([args] { run_verify(*args); });
}

}  // namespace df::cli

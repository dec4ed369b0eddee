// `diskformer pull MODEL [--revision REV] [-o DIR] [--keep-gguf]`: a model from the Hugging Face hub into an
// expert store, verified (hub/pull.h). MODEL is a known model's short name, ORG/NAME[:QUANT] or
// ORG/NAME/FILE.gguf.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/hub_flags.h"
#include "hub/known_models.h"
#include "hub/model_ref.h"
#include "hub/pull.h"
#include "store/progress.h"

namespace df::cli {

namespace {

struct PullArgs {
  std::string model, revision, output;
  bool keep_gguf = false;
  HubFlags hub;
};

void run_pull(const PullArgs& args) {
  const hub::ModelRef ref = hub::parse_model_ref(args.model, args.revision);
  if (ref.pin)
    fmt::print(stderr, "{}: pinned to {} at commit {} (sha256 {})\n", args.model, ref.pin->file,
               ref.pin->revision, ref.pin->sha256);
  PullProgress progress;
  hub::PullOptions o = pull_options(args.hub, progress);
  o.output_dir = args.output;
  o.keep_gguf = args.keep_gguf;
  const hub::PullResult r = hub::pull(ref, o);
  progress.finish();
  const hub::PullRecord& rec = r.record;
  fmt::print("{} {}/{} ({}, sha256 {}) at commit {}\n", r.already_there ? "already pulled:" : "pulled",
             rec.repo, rec.file, store::format_bytes(rec.size), rec.sha256, rec.commit);
  fmt::print("store  {}\n", r.dir);
  if (!r.gguf_path.empty()) fmt::print("gguf   {}\n", r.gguf_path);
  fmt::print("run it: diskformer run -m {} -p \"...\"  (or -hf {})\n", r.dir, args.model);
}

std::string known_list() {
  std::string s = "Known models:\n";
  for (const hub::KnownModel& k : hub::known_models())
    s += fmt::format("  {:<12} {}/{} (commit {}, {})\n", k.alias, k.repo, k.file, k.revision.substr(0, 12),
                     k.description);
  return s;
}

}  // namespace

void register_pull(CLI::App& app) {
  auto args = std::make_shared<PullArgs>();
  CLI::App* cmd = app.add_subcommand(
      "pull",
      "Download a model from the Hugging Face hub (resumable, sha256-verified) and ingest it into an expert "
      "store");
  cmd->add_option(
         "MODEL", args->model,
         "a known model's name, ORG/NAME[:QUANT] (QUANT picks the GGUF by its quant tag, e.g. Q4_0) or "
         "ORG/NAME/FILE.gguf")
      ->required();
  cmd->add_option("--revision", args->revision,
                  "branch, tag or commit (default: main, or the known model's pin)");
  cmd->add_option("-o,--output", args->output,
                  "the model's directory: its expert store, and the download while it runs (default: "
                  "$XDG_CACHE_HOME/diskformer/models/ORG--NAME--FILE)");
  cmd->add_flag("--keep-gguf", args->keep_gguf, "keep the downloaded GGUF beside the store");
  args->hub.add(cmd);
  cmd->footer(known_list());
  cmd->callback([args] { run_pull(*args); });
}

}  // namespace df::cli

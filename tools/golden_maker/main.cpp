// golden_maker: writes diskformer's golden fixtures (schema "diskformer-golden/1", see
// shared/golden/README.md) for one GGUF model, from llama.cpp v0.4.0 as shipped prebuilt by
// node-llama-cpp 3.21.1.
//
// Only the public llama.h / ggml-backend.h / gguf.h API is used, plus libllama-common's
// common_chat_templates_* for chat rendering (exactly what llama-server does with the GGUF's template).
//
// Subcommands (the driver `make` runs the others as child processes of this same binary):
//   make GGUF NAME OUTDIR [options]   everything: text, reference run, the five other CPU paths, statistics,
//                                     NAME.json + NAME.tf_logits.f32 + NAME.l_out.f32 + NAME.topk.f32
//   text  --model GGUF --texts F --out F.json
//                                     tokenizer, chat, prompt ids, model description (no compute)
//   run   --model GGUF --jobs F.json --out DIR [--backend auto|haswell|sse42|x64|...] [--no-repack]
//         [--threads N]
//                                     greedy generations and teacher-forced batches on one CPU path, raw
//                                     dumps
//
// Why child processes: a ggml CPU backend variant (libggml-cpu-<variant>.so) cannot be swapped inside a
// process once a model runs on it, so every CPU path gets its own process; the parent never loads a backend
// itself.

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "child_process.h"
#include "commands.h"
#include "common.h"
#include "llama_util.h"

using namespace golden_maker;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// command line
// ---------------------------------------------------------------------------------------------------------------

const char* kUsage =
    "usage:\n"
    "  golden_maker make GGUF NAME OUTDIR [--texts texts.json] [--regenerate CMD] [--numerics JSON]\n"
    "                    [--cpu zen4|auto|<variant>] [--work DIR] [--keep-work] [--reuse] [--verbose]\n"
    "  golden_maker text --model GGUF --texts texts.json --out FILE.json\n"
    "  golden_maker run  --model GGUF --jobs JOBS.json --out DIR [--backend "
    "auto|haswell|sse42|x64|<variant>]\n"
    "                    [--no-repack] [--threads N]\n";

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) {
      fputs(kUsage, stderr);
      return 2;
    }
    const std::string cmd = argv[1];
    std::vector<std::string> pos;
    std::map<std::string, std::string> opt;
    std::set<std::string> flags;
    const std::set<std::string> flag_names = {"--no-repack", "--keep-work", "--reuse", "--verbose"};
    for (int i = 2; i < argc; i++) {
      const std::string a = argv[i];
      if (a.rfind("--", 0) == 0) {
        if (flag_names.count(a)) {
          flags.insert(a);
        } else if (i + 1 < argc) {
          opt[a] = argv[++i];
        } else {
          fail("option %s needs a value\n%s", a.c_str(), kUsage);
        }
      } else {
        pos.push_back(a);
      }
    }
    auto need = [&](const char* k) {
      auto it = opt.find(k);
      if (it == opt.end()) {
        fail("%s needs %s\n%s", cmd.c_str(), k, kUsage);
      }
      return it->second;
    };
    if (flags.count("--verbose")) {
      g_log_level = GGML_LOG_LEVEL_DEBUG;
    }
    llama_log_set(log_cb, nullptr);

    // texts.json lives beside the binary's source directory unless given
    const std::string default_texts =
        (fs::path(self_exe()).parent_path().parent_path() / "texts.json").string();

    if (cmd == "make") {
      if (pos.size() != 3) {
        fail("make needs GGUF NAME OUTDIR\n%s", kUsage);
      }
      const std::string texts = opt.count("--texts") ? opt["--texts"] : default_texts;
      return cmd_make(pos[0], pos[1], pos[2], fs::absolute(texts).string(), opt["--regenerate"],
                      opt["--numerics"], opt["--work"], flags.count("--keep-work") > 0,
                      flags.count("--reuse") > 0, opt.count("--cpu") ? opt["--cpu"] : "zen4");
    }
    if (cmd == "text") {
      return cmd_text(need("--model"), need("--texts"), need("--out"));
    }
    if (cmd == "run") {
      const int threads = opt.count("--threads") ? atoi(opt["--threads"].c_str()) : 1;
      if (threads < 1) {
        fail("--threads must be >= 1");
      }
      return cmd_run(need("--model"), need("--jobs"), need("--out"),
                     opt.count("--backend") ? opt["--backend"] : "auto", flags.count("--no-repack") > 0,
                     threads);
    }
    fail("unknown command '%s'\n%s", cmd.c_str(), kUsage);
  } catch (const std::exception& e) {
    fprintf(stderr, "golden_maker: error: %s\n", e.what());
    return 1;
  }
}

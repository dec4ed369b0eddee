// The subcommands that main() dispatches to; `make` runs `text` and `run` as child processes of this binary.
#pragma once

#include <string>

namespace golden_maker {

// tokenizer cases, chat renderings, prompt ids, model description (vocab-only load, no compute)
int cmd_text(const std::string& model_path, const std::string& texts_path, const std::string& out_path);

// greedy generations and teacher-forced batches on one CPU path, raw dumps into out_dir
int cmd_run(const std::string& model_path, const std::string& jobs_path, const std::string& out_dir,
            const std::string& backend, bool no_repack, int threads);

// the driver: text, the reference run, the five other CPU paths, statistics, the four fixture files
int cmd_make(const std::string& model_path, const std::string& name, const std::string& out_dir,
             const std::string& texts_path, const std::string& regenerate, const std::string& numerics,
             const std::string& work_arg, bool keep_work, bool reuse, const std::string& ref_cpu);

}  // namespace golden_maker

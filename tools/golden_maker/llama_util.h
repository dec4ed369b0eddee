// llama.cpp helpers shared by the subcommands: logging, where the prebuilt libraries are, tokens, model
// loading.
#pragma once

#include <string>
#include <vector>

#include "common.h"
#include "ggml.h"
#include "llama.h"

namespace golden_maker {

extern int g_log_level;  // GGML_LOG_LEVEL_DEBUG with --verbose

void log_cb(ggml_log_level level, const char* text, void*);

// The directory of the prebuilt node-llama-cpp libraries this binary is linked against (found through
// /proc/self/maps, so that the CPU variants are taken from the same place as libllama itself).
std::string prebuilt_dir();

// Which libggml-cpu-*.so this process runs on (ggml_backend_load_all picks by score; report what it picked).
std::string loaded_cpu_variant();

std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& text, bool add_special,
                                  bool parse_special);
std::string detokenize(const llama_vocab* vocab, const std::vector<llama_token>& ids, bool remove_special,
                       bool unparse_special);

json ids_json(const std::vector<llama_token>& v);
std::vector<llama_token> ids_from(const json& a);

struct ModelHolder {
  llama_model* model = nullptr;
  ~ModelHolder() {
    if (model) {
      llama_model_free(model);
    }
  }
};

llama_model* load_model(const std::string& path, bool vocab_only, bool use_extra_bufts);

// greedy choice: the lowest id wins an exact tie
int argmax_lowest(const float* x, int n);

}  // namespace golden_maker

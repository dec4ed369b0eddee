#pragma once
// Flags shared by run, chat and bench, named as llama.cpp names them.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/model_source.h"
#include "engine/sampler.h"

namespace df::cli {

struct ModelFlags {
  std::string model;
  int threads = 0;
  int ctx = 0;      // 0: min(training context, 4096)
  int batch = 64;   // prefill chunk
  int lookahead = 1;
  void add(CLI::App* app);
  ModelSourceOptions source() const;
  int context_for(int n_ctx_train) const;
};

struct SamplingFlags {
  SamplingParams params;
  std::optional<uint64_t> seed;
  void add(CLI::App* app);
  SamplingParams resolve() const;  // fills a random seed when none was given
};

}  // namespace df::cli

#include "cli/model_flags.h"

#include <algorithm>
#include <random>

#include "util/error.h"

namespace df::cli {

void ModelFlags::add(CLI::App* app) {
  app->add_option("-m,--model", model, "model: a GGUF file")->required();
  app->add_option("-t,--threads", threads, "CPU threads (default: one per core)");
  app->add_option("-c,--ctx-size", ctx, "context size in tokens (default: the training context, at most 4096)");
  app->add_option("-b,--batch-size", batch, "prompt tokens per forward pass (prefill chunk)")->check(CLI::PositiveNumber);
  app->add_option("--lookahead", lookahead, "MoE layers whose experts are guessed ahead (0 = off)")
      ->check(CLI::Range(0, 8));
}

ModelSourceOptions ModelFlags::source() const {
  ModelSourceOptions o;
  o.path = model;
  o.n_threads = threads;
  o.lookahead = lookahead;
  return o;
}

int ModelFlags::context_for(int n_ctx_train) const {
  if (ctx < 0) fail("context size -c {} must be positive", ctx);
  if (ctx > 0) return ctx;
  return n_ctx_train > 0 ? std::min(n_ctx_train, 4096) : 4096;
}

void SamplingFlags::add(CLI::App* app) {
  app->add_option("--temp", params.temperature, "temperature (0 = greedy)")->capture_default_str();
  app->add_option("--top-k", params.top_k, "top-k (0 = off)")->capture_default_str();
  app->add_option("--top-p", params.top_p, "top-p (1 = off)")->capture_default_str();
  app->add_option("--min-p", params.min_p, "min-p (0 = off)")->capture_default_str();
  app->add_option("--repeat-penalty", params.repeat_penalty, "repetition penalty (1 = off)")->capture_default_str();
  app->add_option("--repeat-last-n", params.repeat_last_n, "tokens the repetition penalty looks back")
      ->capture_default_str();
  app->add_option("-s,--seed", seed, "random seed (default: random)");
}

SamplingParams SamplingFlags::resolve() const {
  SamplingParams p = params;
  p.seed = seed ? *seed : (static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}());
  return p;
}

}  // namespace df::cli

#include "engine/generate.h"

#include <chrono>

namespace df {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::EndOfGeneration: return "end of generation";
    case StopReason::TokenLimit: return "token limit";
    case StopReason::ContextFull: return "context full";
    case StopReason::Caller: return "stopped";
  }
  return "?";
}

GenerationResult generate(Session& session, Sampler& sampler, std::span<const int32_t> prompt,
                          const GenerateOptions& options) {
  using clock = std::chrono::steady_clock;
  GenerationResult result;
  if (options.n_predict > 0) result.tokens.reserve(static_cast<size_t>(options.n_predict));
  sampler.reset();
  const size_t history = static_cast<size_t>(sampler.params().repeat_last_n);
  for (size_t i = prompt.size() > history ? prompt.size() - history : 0; i < prompt.size(); ++i)
    sampler.accept(prompt[i]);

  auto t0 = clock::now();
  auto logits = session.prefill(prompt, options.capture);
  result.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  result.prompt_tokens = session.stats().tokens_evaluated;
  if (options.after_forward) options.after_forward(0);
  if (options.n_predict == 0) {
    result.reason = StopReason::TokenLimit;
    return result;
  }

  auto t1 = clock::now();
  for (int step = 0;; ++step) {
    int32_t token = sampler.sample(logits);
    result.tokens.push_back(token);
    if (options.is_stop && options.is_stop(token)) {
      result.reason = StopReason::EndOfGeneration;
      break;
    }
    if (options.on_token && !options.on_token(token)) {
      result.reason = StopReason::Caller;
      break;
    }
    if (options.n_predict > 0 && static_cast<int>(result.tokens.size()) >= options.n_predict) {
      result.reason = StopReason::TokenLimit;
      break;
    }
    if (session.context_full()) {
      result.reason = StopReason::ContextFull;
      break;
    }
    logits = session.decode(token, options.capture);
    if (options.after_forward) options.after_forward(step + 1);
  }
  result.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return result;
}

}  // namespace df

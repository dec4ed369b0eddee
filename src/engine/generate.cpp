#include "engine/generate.h"

#include <chrono>
#include <optional>

namespace df {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::EndOfGeneration:
      return "end of generation";
    case StopReason::TokenLimit:
      return "token limit";
    case StopReason::ContextFull:
      return "context full";
    case StopReason::Caller:
      return "stopped";
  }
  return "?";
}

namespace {

// Adds `token` to the result and says whether generation ends at it, before any decode of it (the caller's
// checks, in this order: end-of-generation token, on_token, the token limit).
std::optional<StopReason> take_token(const GenerateOptions& options, GenerationResult& result,
                                     int32_t token) {
  result.tokens.push_back(token);
  if (options.is_stop && options.is_stop(token)) return StopReason::EndOfGeneration;
  if (options.on_token && !options.on_token(token)) return StopReason::Caller;
  if (options.n_predict > 0 && static_cast<int>(result.tokens.size()) >= options.n_predict)
    return StopReason::TokenLimit;
  return std::nullopt;
}

// The loop below with each step queued before the previous token has come back (Session::greedy_start):
// the same tokens and stop reasons. A step is queued for each token before the caller's checks have seen
// it; when they stop at it, that step has run (the session's tokens include the token).
void generate_ahead(Session& session, Sampler& sampler, int32_t token, const GenerateOptions& options,
                    GenerationResult& result) {
  bool started = false, decoded = false;
  // A callback that throws leaves no step queued behind it.
  struct Finish {
    Session& s;
    ~Finish() {
      try {
        s.greedy_finish();
      } catch (...) {  // the step failed as well: its state is reset already
      }
    }
  } finish{session};
  for (;;) {
    if (const auto stop = take_token(options, result, token)) {
      result.reason = *stop;
      break;
    }
    if (!started) {
      if (session.context_full()) {
        result.reason = StopReason::ContextFull;
        break;
      }
      session.greedy_start(token);
      started = true;
    } else if (!decoded) {  // greedy_next found no room for the step that decodes `token`
      result.reason = StopReason::ContextFull;
      break;
    }
    // Whether the loop would decode the next token if the checks above let it: the step is queued now.
    const bool more =
        options.n_predict <= 0 || static_cast<int>(result.tokens.size()) + 1 < options.n_predict;
    const size_t before = session.tokens().size();
    token = session.greedy_next(more);
    sampler.accept(token);
    decoded = session.tokens().size() > before;
  }
  if (started) session.greedy_finish();  // its failure is the caller's to see
}

}  // namespace

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
  if (session.greedy_ahead() && sampler.plain_greedy() && !options.capture && !options.after_forward) {
    generate_ahead(session, sampler, sampler.sample(logits), options, result);
    result.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return result;
  }
  for (int step = 0;; ++step) {
    int32_t token = sampler.sample(logits);
    if (const auto stop = take_token(options, result, token)) {
      result.reason = *stop;
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

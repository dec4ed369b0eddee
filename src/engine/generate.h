#pragma once
// The prompt → tokens loop shared by `run`, `chat` and `bench`: prefill (with prefix reuse), then sample and
// decode until an end-of-generation token, the token limit, the context end or the caller says stop.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "engine/session.h"

namespace df {

enum class StopReason { EndOfGeneration, TokenLimit, ContextFull, Caller };
const char* stop_reason_name(StopReason r);

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated, the stop token included when it ended generation
  StopReason reason = StopReason::TokenLimit;
  int prompt_tokens = 0;        // evaluated in this call (after prefix reuse)
  double prefill_seconds = 0;
  double decode_seconds = 0;    // over tokens.size() - 1 decode steps (the first token comes from prefill)
};

struct GenerateOptions {
  int n_predict = -1;                              // < 0: until a stop condition
  std::function<bool(int32_t)> is_stop;            // end-of-generation tokens
  std::function<bool(int32_t)> on_token;           // return false to stop after this token
  models::ForwardCapture* capture = nullptr;       // filled on every forward (prefill, then each decode)
  std::function<void(int step)> after_forward;     // called after each forward with the capture filled
};

GenerationResult generate(Session& session, Sampler& sampler, std::span<const int32_t> prompt,
                          const GenerateOptions& options);

}  // namespace df

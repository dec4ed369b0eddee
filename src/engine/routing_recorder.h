#pragma once
// --record-routing FILE: every forward's routing written as a llama.cpp llama-moe-trace CSV
// (stream/routing_trace.h), so that `diskformer replay` — or anyone's tools for llama.cpp traces — can
// size a cache from it. Positions count from the end of the prompt being prefilled: its rows are -n..-1,
// then decode rows 0, 1, ...; each prefill starts again (a chat's turns are sessions one after the other).
// Rows go through a fixed buffer into an AtomicFile, so recording allocates nothing per token, and the
// file appears under its name only once finish() has written all of it.
#include <cstdint>
#include <string>

#include "models/model.h"
#include "util/atomic_file.h"

namespace df {

class RoutingRecorder final : public models::RoutingSink {
 public:
  explicit RoutingRecorder(std::string path);
  // The prompt that the next prefill makes the state hold has `prompt_tokens` tokens (reused ones too).
  void begin_prompt(int prompt_tokens) { prompt_end_ = prompt_tokens; }
  void routed(int moe_layer, int first_pos, std::span<const int32_t> ids, int64_t T, int k) override;
  // Flushes, fsyncs and renames the file into place; df::Error when that fails. Once only.
  void finish();
  uint64_t rows() const { return rows_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  AtomicFile file_;
  int prompt_end_ = 0;
  uint64_t rows_ = 0;
  bool finished_ = false;
};

}  // namespace df

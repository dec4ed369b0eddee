#include "engine/routing_recorder.h"

#include "stream/routing_trace.h"
#include "util/error.h"

namespace df {

RoutingRecorder::RoutingRecorder(std::string path) : path_(std::move(path)), file_(path_) {}

void RoutingRecorder::routed(int moe_layer, int first_pos, std::span<const int32_t> ids, int64_t T, int k) {
  if (finished_) fail("--record-routing {}: routing after the trace was finished", path_);
  // llama.cpp's order: the batch's tokens of this layer, one row each.
  char row[4096];
  for (int64_t t = 0; t < T; ++t) {
    const auto token_ids = ids.subspan(static_cast<size_t>(t * k), static_cast<size_t>(k));
    const int32_t pos = static_cast<int32_t>(first_pos + t - prompt_end_);
    const size_t n = stream::format_trace_row(row, sizeof row, pos, moe_layer, token_ids);
    if (n == 0) fail("--record-routing {}: a row of {} ids is too wide", path_, k);
    file_.write(row, n);
    ++rows_;
  }
}

void RoutingRecorder::finish() {
  if (finished_) return;
  finished_ = true;
  try {
    file_.commit();
  } catch (const Error& e) {
    fail("--record-routing {}: {}", path_, e.what());
  }
}

}  // namespace df

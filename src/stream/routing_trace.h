#pragma once
// Routing traces: which experts a model chose, one row per (token position, MoE layer). Read from the CSV
// that llama.cpp's llama-moe-trace writes (`pos,layer,id1,...,idK`, no header; prompt rows at negative
// positions -n..-1, decode rows at 0, 1, ...; the order the model ran them: a prompt batch layer by layer,
// then each decode step's layers) — which `--record-routing` writes too — or from the JSON lines of the vLLM
// route-logging patches (a "meta" line, then "route" lines with token_idx, layer, topk_ids). Rows keep the
// file's order; a file may hold several sessions one after the other (positions start again).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace df::stream {

struct RoutingTrace {
  std::string name;                 // the file, for messages
  int k = 0;                        // ids per row
  int n_layers = 0;                 // highest layer + 1
  int n_expert = 0;                 // from the file's metadata, else the highest id + 1
  std::vector<int32_t> pos, layer;  // per row
  std::vector<int32_t> ids;         // rows × k, in the router's order
  size_t warmup_rows_dropped = 0;   // vLLM warm-up passes (runs of >= kWarmupRun identical rows)

  size_t rows() const { return pos.size(); }
  std::span<const int32_t> row_ids(size_t r) const {
    return {ids.data() + r * static_cast<size_t>(k), static_cast<size_t>(k)};
  }
  bool prompt_row(size_t r) const { return pos[r] < 0; }
  void add_row(int32_t p, int32_t l, std::span<const int32_t> row);
};

// A run of this many identical rows or more in a vLLM log is a dummy warm-up pass, not routing.
constexpr size_t kWarmupRun = 256;

// Reads either form (JSON lines when the first non-blank character is '{'). Throws df::Error naming the file
// and line for anything malformed: a field that is not an integer, rows of different widths, a negative
// layer or id, an id twice in one row, an empty file.
RoutingTrace read_routing_trace(const std::string& path);
RoutingTrace parse_llama_csv(std::string_view text, const std::string& name);
RoutingTrace parse_vllm_jsonl(std::string_view text, const std::string& name);

// One CSV row ("pos,layer,id1,...,idK\n") into buf; returns its length, or 0 when it does not fit. For
// writers that must not allocate (the recorder on the decode path).
size_t format_trace_row(char* buf, size_t cap, int32_t pos, int32_t layer, std::span<const int32_t> ids);
// The whole trace in the CSV form.
std::string to_llama_csv(const RoutingTrace& trace);

}  // namespace df::stream

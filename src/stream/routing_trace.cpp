#include "stream/routing_trace.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/error.h"

namespace df::stream {
namespace {

// A trace holds a few hundred thousand rows at most; this only keeps a wrong file from exhausting memory.
constexpr int kMaxIds = 1 << 16;
constexpr int kMaxId = 1 << 24;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

int32_t parse_int(std::string_view field, const std::string& name, size_t line, const char* what) {
  field = trim(field);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ec != std::errc() || end != field.data() + field.size() || field.empty() || v < INT32_MIN ||
      v > INT32_MAX)
    fail("{}:{}: {} '{}' is not an integer", name, line, what, field);
  return static_cast<int32_t>(v);
}

// f(line, line_no) for every line of text that is not blank, trimmed; line numbers count from 1.
template <class F>
void for_each_line(std::string_view text, F&& f) {
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (!line.empty()) f(line, line_no);
  }
}

void check_row(std::span<const int32_t> ids, int32_t layer, const std::string& name, size_t line) {
  if (layer < 0 || layer >= kMaxIds) fail("{}:{}: layer {} out of range", name, line, layer);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= kMaxId) fail("{}:{}: expert id {} out of range", name, line, ids[i]);
    for (size_t j = 0; j < i; ++j)
      if (ids[j] == ids[i]) fail("{}:{}: expert {} is chosen twice in one row", name, line, ids[i]);
  }
}

void finish(RoutingTrace& t, int declared_experts) {
  if (t.rows() == 0) fail("{}: no routing rows", t.name);
  int max_id = 0;
  for (int32_t id : t.ids) max_id = std::max(max_id, id);
  if (declared_experts > 0 && max_id >= declared_experts)
    fail("{}: expert id {} but the file declares {} experts", t.name, max_id, declared_experts);
  t.n_expert = declared_experts > 0 ? declared_experts : max_id + 1;
}

}  // namespace

void RoutingTrace::add_row(int32_t p, int32_t l, std::span<const int32_t> row) {
  pos.push_back(p);
  layer.push_back(l);
  ids.insert(ids.end(), row.begin(), row.end());
  n_layers = std::max(n_layers, l + 1);
}

RoutingTrace parse_llama_csv(std::string_view text, const std::string& name) {
  RoutingTrace t;
  t.name = name;
  std::vector<int32_t> row;
  for_each_line(text, [&](std::string_view line, size_t line_no) {
    if (line_no == 1 && line.substr(0, 3) == "pos") return;  // a header line, as some tools add
    row.clear();
    int32_t pos = 0, layer = 0;
    size_t field = 0;
    for (size_t start = 0; start <= line.size(); ++field) {
      const size_t comma = std::min(line.find(',', start), line.size());
      const std::string_view f = line.substr(start, comma - start);
      if (field == 0)
        pos = parse_int(f, name, line_no, "position");
      else if (field == 1)
        layer = parse_int(f, name, line_no, "layer");
      else
        row.push_back(parse_int(f, name, line_no, "expert id"));
      if (row.size() > static_cast<size_t>(kMaxIds)) fail("{}:{}: too many ids in one row", name, line_no);
      start = comma + 1;
    }
    if (row.empty()) fail("{}:{}: a row needs pos,layer and at least one expert id", name, line_no);
    if (t.k == 0) t.k = static_cast<int>(row.size());
    if (row.size() != static_cast<size_t>(t.k))
      fail("{}:{}: {} expert ids, the rows before have {}", name, line_no, row.size(), t.k);
    check_row(row, layer, name, line_no);
    t.add_row(pos, layer, row);
  });
  finish(t, 0);
  return t;
}

RoutingTrace parse_vllm_jsonl(std::string_view text, const std::string& name) {
  RoutingTrace raw;
  raw.name = name;
  int declared = 0;
  std::vector<int32_t> row;
  for_each_line(text, [&](std::string_view line, size_t line_no) {
    nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) fail("{}:{}: not a JSON object", name, line_no);
    const std::string type = j.value("type", "");
    if (type == "meta") {
      if (j.contains("num_experts") && j["num_experts"].is_number_integer())
        declared = j["num_experts"].get<int>();
      return;
    }
    if (type != "route") return;
    const auto& tok = j["token_idx"];
    const auto& lay = j["layer"];
    const auto& ids = j["topk_ids"];
    if (!tok.is_number_integer() || !lay.is_number_integer() || !ids.is_array() || ids.empty())
      fail("{}:{}: a route line needs integer token_idx and layer and a non-empty topk_ids", name, line_no);
    row.clear();
    for (const auto& v : ids) {
      if (!v.is_number_integer()) fail("{}:{}: topk_ids holds a non-integer", name, line_no);
      row.push_back(v.get<int32_t>());
    }
    if (raw.k == 0) raw.k = static_cast<int>(row.size());
    if (row.size() != static_cast<size_t>(raw.k))
      fail("{}:{}: {} expert ids, the rows before have {}", name, line_no, row.size(), raw.k);
    const int32_t layer = lay.get<int32_t>();
    check_row(row, layer, name, line_no);
    raw.add_row(tok.get<int32_t>(), layer, row);
  });
  if (raw.rows() == 0) fail("{}: no route lines", name);
  // Drop warm-up passes: runs of kWarmupRun or more rows with the same layer and ids.
  RoutingTrace t;
  t.name = name;
  t.k = raw.k;
  for (size_t r = 0; r < raw.rows();) {
    size_t end = r + 1;
    while (end < raw.rows() && raw.layer[end] == raw.layer[r] &&
           std::equal(raw.row_ids(end).begin(), raw.row_ids(end).end(), raw.row_ids(r).begin()))
      ++end;
    if (end - r >= kWarmupRun)
      t.warmup_rows_dropped += end - r;
    else
      for (size_t i = r; i < end; ++i) t.add_row(raw.pos[i], raw.layer[i], raw.row_ids(i));
    r = end;
  }
  if (t.rows() == 0) fail("{}: every route line belongs to a warm-up run", name);
  finish(t, declared);
  return t;
}

RoutingTrace read_routing_trace(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read routing trace '{}'", path);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("{}: read error", path);
  const std::string text = ss.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) fail("{}: empty routing trace", path);
  return text[first] == '{' ? parse_vllm_jsonl(text, path) : parse_llama_csv(text, path);
}

size_t format_trace_row(char* buf, size_t cap, int32_t pos, int32_t layer, std::span<const int32_t> ids) {
  char* p = buf;
  char* const end = buf + cap;
  const auto put = [&](int32_t v, char sep) {
    if (p == end) return false;
    const auto r = std::to_chars(p, end, v);
    if (r.ec != std::errc() || r.ptr == end) return false;
    p = r.ptr;
    *p++ = sep;
    return true;
  };
  if (!put(pos, ',') || !put(layer, ids.empty() ? '\n' : ',')) return 0;
  for (size_t i = 0; i < ids.size(); ++i)
    if (!put(ids[i], i + 1 == ids.size() ? '\n' : ',')) return 0;
  return static_cast<size_t>(p - buf);
}

std::string to_llama_csv(const RoutingTrace& t) {
  std::string out;
  char buf[4096];
  for (size_t r = 0; r < t.rows(); ++r) {
    const size_t n = format_trace_row(buf, sizeof buf, t.pos[r], t.layer[r], t.row_ids(r));
    if (n == 0) fail("{}: row {} is too wide to write", t.name, r + 1);
    out.append(buf, n);
  }
  return out;
}

}  // namespace df::stream

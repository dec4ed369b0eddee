#include "store/manifest.h"

#include <fmt/format.h>

#include <limits>

#include "util/error.h"

namespace df::store {

namespace {

constexpr const char* kManifestFormat = "diskformer-store";

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

Json part_to_json(const ExpertPart& p) {
  Json j;
  j["tensor"] = p.tensor;
  j["type"] = std::string(ggml_type_name(p.type));
  j["n_in"] = p.n_in;
  j["n_out"] = p.n_out;
  j["first_row"] = p.first_row;
  j["packing"] = std::string(quant::row_packing_name(p.packing));
  j["offset"] = p.offset;
  j["bytes"] = p.bytes;
  return j;
}

GgmlType type_from_json(const Json& j, std::string_view key, const std::string& path) {
  std::string name = json_string(j, key, path);
  auto t = ggml_type_from_name(name);
  if (!t) fail("field '{}' is '{}', which is not a ggml type this build knows", join(path, key), name);
  return *t;
}

ExpertPart part_from_json(const Json& j, const std::string& path) {
  ExpertPart p;
  p.tensor = json_string(j, "tensor", path);
  p.type = type_from_json(j, "type", path);
  p.n_in = json_i64(j, "n_in", path);
  p.n_out = json_i64(j, "n_out", path);
  p.first_row = json_i64(j, "first_row", path);
  const std::string packing = json_string(j, "packing", path);
  if (!quant::parse_row_packing(packing, p.packing))
    fail("field '{}' is \"{}\", expected \"none\" or \"q4_0x16\"", join(path, "packing"), packing);
  p.offset = json_u64(j, "offset", path);
  p.bytes = json_u64(j, "bytes", path);
  return p;
}

void check_part(const ExpertPart& p, const Layout& layout, int layer, std::string_view which) {
  std::string what =
      fmt::format("MoE layer {} (blk.{}) {} part '{}'", layer, layout.layers[layer].layer, which, p.tensor);
  if (p.tensor.empty()) fail("{}: no source tensor name", what);
  if (p.n_in <= 0 || p.n_out <= 0) fail("{}: shape {} x {} is empty", what, p.n_out, p.n_in);
  const auto& tr = ggml_traits(p.type);
  if (p.n_in % tr.block_size != 0)
    fail("{}: row length {} is not a multiple of the {} block size {}", what, p.n_in, tr.name, tr.block_size);
  if (p.first_row < 0) fail("{}: first_row {} is negative", what, p.first_row);
  uint64_t expect = ggml_row_bytes(p.type, p.n_in) * static_cast<uint64_t>(p.n_out);
  if (p.bytes != expect)
    fail("{}: {} bytes, but {} rows of {} {} values are {} bytes", what, p.bytes, p.n_out, p.n_in, tr.name,
         expect);
  if (p.packing != quant::RowPacking::kNone && p.packing != quant::preferred_packing(p.type, p.n_out))
    fail("{}: {} rows of {} cannot be stored {}", what, p.n_out, tr.name, quant::row_packing_name(p.packing));
  if (p.offset % kPartAlign != 0) fail("{}: offset {} is not a multiple of {}", what, p.offset, kPartAlign);
  if (p.offset > layout.record_bytes || p.bytes > layout.record_bytes - p.offset)
    fail("{}: bytes [{}, {}) run past the record size {}", what, p.offset, p.offset + p.bytes,
         layout.record_bytes);
}

}  // namespace

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

const Json& json_field(const Json& j, std::string_view key, const std::string& path) {
  if (!j.is_object()) fail("field '{}' is not an object", path.empty() ? "(top level)" : path);
  auto it = j.find(std::string(key));
  if (it == j.end()) fail("field '{}' is missing", join(path, key));
  return *it;
}

uint64_t json_u64(const Json& j, std::string_view key, const std::string& path) {
  const Json& v = json_field(j, key, path);
  if (!v.is_number_unsigned())
    fail("field '{}' is {}, expected a non-negative integer", join(path, key), v.dump());
  return v.get<uint64_t>();
}

int64_t json_i64(const Json& j, std::string_view key, const std::string& path) {
  const Json& v = json_field(j, key, path);
  if (!v.is_number_integer()) fail("field '{}' is {}, expected an integer", join(path, key), v.dump());
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail("field '{}' is {}, too large", join(path, key), v.dump());
  return v.get<int64_t>();
}

std::string json_string(const Json& j, std::string_view key, const std::string& path) {
  const Json& v = json_field(j, key, path);
  if (!v.is_string()) fail("field '{}' is {}, expected a string", join(path, key), v.dump());
  return v.get<std::string>();
}

uint64_t json_hex64(const Json& v, const std::string& path) {
  if (!v.is_string() || v.get<std::string>().size() != 16)
    fail("field '{}' is {}, expected 16 hex digits", path, v.dump());
  uint64_t out = 0;
  for (char c : v.get<std::string>()) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (d < 0) fail("field '{}' is {}, expected 16 lowercase hex digits", path, v.dump());
    out = out << 4 | static_cast<uint64_t>(d);
  }
  return out;
}

Json source_to_json(const SourceInfo& s) {
  Json j;
  j["name"] = s.name;
  j["size"] = s.size;
  j["sha256"] = s.sha256;
  return j;
}

SourceInfo source_from_json(const Json& j, const std::string& path) {
  SourceInfo s;
  s.name = json_string(j, "name", path);
  s.size = json_u64(j, "size", path);
  s.sha256 = json_string(j, "sha256", path);
  if (s.sha256.size() != 64 || s.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
    fail("field '{}.sha256' is '{}', expected 64 lowercase hex digits", path, s.sha256);
  return s;
}

Json layout_to_json(const Layout& layout) {
  Json j;
  j["record_align"] = kRecordAlign;
  j["record_bytes"] = layout.record_bytes;
  j["n_moe_layers"] = layout.n_moe_layers;
  j["n_expert"] = layout.n_expert;
  Json layers = Json::array();
  for (const auto& l : layout.layers) {
    Json lj;
    lj["layer"] = l.layer;
    lj["gate"] = part_to_json(l.gate);
    lj["up"] = part_to_json(l.up);
    lj["down"] = part_to_json(l.down);
    layers.push_back(std::move(lj));
  }
  j["layers"] = std::move(layers);
  return j;
}

Layout layout_from_json(const Json& j, const std::string& path) {
  Layout layout;
  uint64_t align = json_u64(j, "record_align", path);
  if (align != kRecordAlign) fail("field '{}.record_align' is {}, expected {}", path, align, kRecordAlign);
  layout.record_bytes = json_u64(j, "record_bytes", path);
  int64_t n_layers = json_i64(j, "n_moe_layers", path);
  int64_t n_expert = json_i64(j, "n_expert", path);
  if (n_layers <= 0 || n_layers > 1 << 16)
    fail("field '{}.n_moe_layers' is {}, out of range", path, n_layers);
  if (n_expert <= 0 || n_expert > 1 << 16) fail("field '{}.n_expert' is {}, out of range", path, n_expert);
  layout.n_moe_layers = static_cast<int>(n_layers);
  layout.n_expert = static_cast<int>(n_expert);
  const Json& layers = json_field(j, "layers", path);
  if (!layers.is_array()) fail("field '{}.layers' is not an array", path);
  for (size_t i = 0; i < layers.size(); ++i) {
    std::string lp = fmt::format("{}.layers[{}]", path, i);
    MoeLayerLayout l;
    int64_t index = json_i64(layers[i], "layer", lp);
    if (index < 0 || index > 1 << 20) fail("field '{}.layer' is {}, out of range", lp, index);
    l.layer = static_cast<int>(index);
    l.gate = part_from_json(json_field(layers[i], "gate", lp), lp + ".gate");
    l.up = part_from_json(json_field(layers[i], "up", lp), lp + ".up");
    l.down = part_from_json(json_field(layers[i], "down", lp), lp + ".down");
    layout.layers.push_back(std::move(l));
  }
  validate_layout(layout);
  return layout;
}

void validate_layout(const Layout& layout) {
  if (layout.n_expert <= 0) fail("layout: n_expert {} is not positive", layout.n_expert);
  if (layout.n_moe_layers <= 0 || static_cast<size_t>(layout.n_moe_layers) != layout.layers.size())
    fail("layout: n_moe_layers is {} but {} layers are described", layout.n_moe_layers, layout.layers.size());
  if (layout.record_bytes == 0 || layout.record_bytes % kRecordAlign != 0)
    fail("layout: record_bytes {} is not a positive multiple of {}", layout.record_bytes, kRecordAlign);
  if (layout.record_bytes > std::numeric_limits<uint64_t>::max() / layout.n_records())
    fail("layout: {} records of {} bytes overflow a 64-bit size", layout.n_records(), layout.record_bytes);
  uint64_t needed = 0;
  for (int i = 0; i < layout.n_moe_layers; ++i) {
    const auto& l = layout.layers[i];
    if (i > 0 && l.layer <= layout.layers[i - 1].layer)
      fail("layout: MoE layer {} is model layer {}, not after the previous one ({})", i, l.layer,
           layout.layers[i - 1].layer);
    check_part(l.gate, layout, i, "gate");
    check_part(l.up, layout, i, "up");
    check_part(l.down, layout, i, "down");
    if (l.up.offset < l.gate.offset + l.gate.bytes || l.down.offset < l.up.offset + l.up.bytes)
      fail("layout: MoE layer {} (blk.{}): the gate, up and down parts overlap or are out of order", i,
           l.layer);
    needed = std::max(needed, align_up(l.down.offset + l.down.bytes, kRecordAlign));
  }
  if (needed != layout.record_bytes)
    fail("layout: record_bytes is {}, but the largest layer needs {} (after rounding up to {})",
         layout.record_bytes, needed, kRecordAlign);
}

std::string manifest_to_string(const Manifest& m) {
  Json j;
  j["format"] = kManifestFormat;
  j["format_version"] = m.format_version;
  j["created_by"] = "diskformer";
  j["architecture"] = m.architecture;
  j["source"] = source_to_json(m.source);
  j["config"] = m.config;
  j["layout"] = layout_to_json(m.layout);
  Json files;
  files[kExpertsFile] = Json{{"bytes", m.experts_bytes}};
  files[kDenseFile] = Json{{"bytes", m.dense_bytes}};
  j["files"] = std::move(files);
  Json records = Json::array();
  for (uint64_t c : m.record_checksums) records.push_back(hex64(c));
  j["records"] = Json{{"checksum", "xxh3-64"}, {"order", "moe_layer * n_expert + expert"}, {"xxh3", records}};
  Json dense = Json::array();
  for (const auto& t : m.dense_tensors) {
    Json tj;
    tj["name"] = t.name;
    tj["type"] = std::string(ggml_type_name(t.type));
    tj["ne"] = t.ne;
    tj["bytes"] = t.bytes;
    tj["xxh3"] = hex64(t.xxh3);
    dense.push_back(std::move(tj));
  }
  j["dense_tensors"] = std::move(dense);
  // Last, so that even a reader of a truncated text never sees the flag before everything else.
  j["complete"] = m.complete;
  return j.dump(1) + "\n";
}

namespace {

Json parse_json(std::string_view text) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    fail("it is not valid JSON ({})", e.what());
  }
}

}  // namespace

Manifest parse_manifest(std::string_view text) {
  Json j = parse_json(text);
  Manifest m;
  if (json_string(j, "format", "") != kManifestFormat)
    fail("field 'format' is '{}', expected '{}'", json_string(j, "format", ""), kManifestFormat);
  int64_t version = json_i64(j, "format_version", "");
  if (version != kFormatVersion)
    fail("it has format version {}; this diskformer reads version {} only", version, kFormatVersion);
  m.format_version = static_cast<int>(version);
  // A missing flag means "not complete", which the caller reports as an unfinished ingest.
  if (j.contains("complete")) {
    const Json& complete = j["complete"];
    if (!complete.is_boolean()) fail("field 'complete' is {}, expected true or false", complete.dump());
    m.complete = complete.get<bool>();
  }
  m.architecture = json_string(j, "architecture", "");
  m.source = source_from_json(json_field(j, "source", ""), "source");
  m.config = json_field(j, "config", "");
  m.layout = layout_from_json(json_field(j, "layout", ""), "layout");
  const Json& files = json_field(j, "files", "");
  m.experts_bytes = json_u64(json_field(files, kExpertsFile, "files"), "bytes", "files.experts.bin");
  m.dense_bytes = json_u64(json_field(files, kDenseFile, "files"), "bytes", "files.dense.bin");
  if (m.experts_bytes != m.layout.experts_bytes())
    fail("field 'files.experts.bin.bytes' is {}, but {} records of {} bytes are {}", m.experts_bytes,
         m.layout.n_records(), m.layout.record_bytes, m.layout.experts_bytes());
  const Json& records = json_field(json_field(j, "records", ""), "xxh3", "records");
  if (!records.is_array() || records.size() != m.layout.n_records())
    fail("field 'records.xxh3' holds {} checksums, expected {} ({} MoE layers x {} experts)",
         records.is_array() ? records.size() : 0, m.layout.n_records(), m.layout.n_moe_layers,
         m.layout.n_expert);
  for (size_t i = 0; i < records.size(); ++i)
    m.record_checksums.push_back(json_hex64(records[i], fmt::format("records.xxh3[{}]", i)));
  const Json& dense = json_field(j, "dense_tensors", "");
  if (!dense.is_array()) fail("field 'dense_tensors' is not an array");
  for (size_t i = 0; i < dense.size(); ++i) {
    std::string p = fmt::format("dense_tensors[{}]", i);
    DenseTensorEntry t;
    t.name = json_string(dense[i], "name", p);
    t.type = type_from_json(dense[i], "type", p);
    const Json& ne = json_field(dense[i], "ne", p);
    if (!ne.is_array() || ne.empty() || ne.size() > 4)
      fail("field '{}.ne' is not an array of 1 to 4 sizes", p);
    for (size_t d = 0; d < ne.size(); ++d) {
      if (!ne[d].is_number_integer() || ne[d].get<int64_t>() <= 0)
        fail("field '{}.ne[{}]' is {}, expected a positive integer", p, d, ne[d].dump());
      t.ne.push_back(ne[d].get<int64_t>());
    }
    t.bytes = json_u64(dense[i], "bytes", p);
    t.xxh3 = json_hex64(json_field(dense[i], "xxh3", p), p + ".xxh3");
    m.dense_tensors.push_back(std::move(t));
  }
  return m;
}

SourceInfo peek_manifest_source(std::string_view text) {
  try {
    Json j = Json::parse(text);
    return source_from_json(json_field(j, "source", ""), "source");
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace df::store

#pragma once
// manifest.json and the ingest journal as data: conversion to and from JSON, and the consistency rules of a
// layout. Parsing errors name the JSON field ("layout.layers[2].gate.bytes"); callers add the file and the
// fix.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.h"

namespace df::store {

using Json = nlohmann::ordered_json;

struct DenseTensorEntry {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
};

struct Manifest {
  int format_version = kFormatVersion;
  bool complete = false;
  std::string architecture;
  Json config = Json::object();  // informational: the source's scalar "<arch>.*" keys
  SourceInfo source;
  Layout layout;
  uint64_t experts_bytes = 0, dense_bytes = 0;
  std::vector<uint64_t> record_checksums;  // record order: moe_layer * n_expert + expert
  std::vector<DenseTensorEntry> dense_tensors;
};

std::string hex64(uint64_t v);  // 16 lowercase hex digits

Json source_to_json(const SourceInfo& s);
SourceInfo source_from_json(const Json& j, const std::string& path);
Json layout_to_json(const Layout& layout);
Layout layout_from_json(const Json& j, const std::string& path);
// Throws df::Error when parts overlap, sizes disagree with the block geometry, offsets are misaligned, ...
void validate_layout(const Layout& layout);

std::string manifest_to_string(const Manifest& m);
// Reads every field; checks the format, the version (before anything else, so an old or new store says so
// rather than "field missing"), the layout rules and the counts of checksums.
Manifest parse_manifest(std::string_view text);
// Only the source (name, size, sha256) of a manifest that may be damaged otherwise: who owns a directory.
// An empty sha256 when even that cannot be read.
SourceInfo peek_manifest_source(std::string_view text);

// Typed field access with the JSON path in every error.
const Json& json_field(const Json& j, std::string_view key, const std::string& path);
uint64_t json_u64(const Json& j, std::string_view key, const std::string& path);
int64_t json_i64(const Json& j, std::string_view key, const std::string& path);
std::string json_string(const Json& j, std::string_view key, const std::string& path);
uint64_t json_hex64(const Json& v, const std::string& path);

}  // namespace df::store

#pragma once
// The cache's view of an opened store. Header-only so that df_stream itself needs no df_store: whoever calls
// this (the engine) links both.
#include "store/store.h"
#include "stream/record_source.h"

namespace df::stream {

inline RecordSource record_source_of(const store::Store& s) {
  RecordSource src{s.experts_path(), s.layout(), {}};
  const store::Layout& l = s.layout();
  src.checksums.reserve(static_cast<size_t>(l.n_moe_layers) * static_cast<size_t>(l.n_expert));
  for (int layer = 0; layer < l.n_moe_layers; ++layer)
    for (int e = 0; e < l.n_expert; ++e) src.checksums.push_back(s.record_checksum(layer, e));
  return src;
}

}  // namespace df::stream

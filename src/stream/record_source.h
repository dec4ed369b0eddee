#pragma once
// What the cache reads: experts.bin, the store's record layout, and one xxh3-64 checksum per record. The
// engine fills it from an opened store (store_source.h); tests build one by hand.
#include <cstdint>
#include <string>
#include <vector>

#include "store/store.h"

namespace df::stream {

struct RecordSource {
  std::string experts_path;
  store::Layout layout;
  std::vector<uint64_t> checksums;  // index moe_layer * n_expert + expert: xxh3-64 of the whole record

  // Throws df::Error naming the file when the layout or the checksums are inconsistent.
  void validate() const;
};

}  // namespace df::stream

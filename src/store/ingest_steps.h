#pragma once
// The steps of ingest() (ingest.h), one file each: experts.bin.partial with its journal, and dense.bin.
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "store/ingest.h"
#include "store/manifest.h"
#include "store/plan.h"

namespace df::store {

// Records already in experts.bin.partial that the journal vouches for and whose bytes still match; removes
// the partial file and journal when they belong to another source or layout. Fills `checksums` with the kept
// ones.
uint64_t resumable_records(const std::string& dir, const SourceInfo& source, const Layout& layout,
                           std::vector<uint64_t>& checksums, const IngestOptions& opt);

// Writes records [first_record, n_records) of experts.bin.partial, checkpointing the journal; on return the
// file is complete, fsynced, and `checksums` has one entry per record.
void write_experts(const gguf::File& src, const StorePlan& plan, const std::string& dir,
                   const SourceInfo& source, uint64_t first_record, std::vector<uint64_t>& checksums,
                   const IngestOptions& opt);

// dense.bin (alignment 4096): all source metadata, the diskformer.store.* keys, every non-expert tensor.
// Returns the manifest entries of its tensors (with checksums).
std::vector<DenseTensorEntry> write_dense(const gguf::File& src, const StorePlan& plan,
                                          const std::string& dir, const SourceInfo& source,
                                          const IngestOptions& opt);

}  // namespace df::store

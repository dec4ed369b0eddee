#pragma once
// The expert store (DESIGN.md "The expert store"): what `diskformer ingest` writes and what the runtime
// reads.
//
//   STORE/manifest.json  format version, architecture, config (the source's scalar "<arch>.*" keys), source
//   file
//                        name + size + sha256, the layout below, one xxh3-64 checksum per expert record and
//                        per dense tensor, and "complete": true. It is the last file an ingest writes (to a
//                        temporary name, fsynced, renamed), so a directory without it never looks like a
//                        store.
//   STORE/experts.bin    one record per (MoE layer, expert): gate rows, up rows, down rows, each part
//   starting
//                        at a 64-byte aligned offset inside the record, the record padded with zeros to a
//                        multiple of 4096 bytes, so one O_DIRECT read of record_bytes at record_offset()
//                        fetches one expert. The rows are the GGUF's bytes, either unchanged (ggml block
//                        layout, rows contiguous) or repacked as the part's `packing` says.
//   STORE/dense.bin      a GGUF file (alignment 4096) holding all metadata of the source and every tensor
//   that
//                        is not a routed-expert weight, so the trunk loads with the ordinary GGUF reader.
//                        Per-expert biases (gpt-oss blk.N.ffn_{gate,up,down}_exps.bias, {N, E} F32) stay
//                        here: they are small, and keeping them resident saves a second read per expert.
//                        Extra keys:
//                          diskformer.store.format_version  u32
//                          diskformer.store.source_name     string
//                          diskformer.store.source_size     u64
//                          diskformer.store.source_sha256   string (hex)
//                          diskformer.store.n_expert        u32
//                          diskformer.store.moe_layers      i32 array: model layer index of each MoE layer
//                          diskformer.store.record_bytes    u64
//
// While an ingest runs (or after it was killed) the directory holds experts.bin.partial and the journal
// ingest.partial; the next ingest resumes from the journal after re-checking the records it lists (ingest.h).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/ggml_types.h"
#include "quant/q4_0x16.h"

namespace df::store {

// 2: Q4_0 parts of whole 16-row groups are stored repacked (ExpertPart::packing).
constexpr int kFormatVersion = 2;
constexpr uint64_t kRecordAlign = 4096;
constexpr uint64_t kPartAlign = 64;

constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kExpertsFile = "experts.bin";
constexpr const char* kDenseFile = "dense.bin";
constexpr const char* kExpertsPartialFile = "experts.bin.partial";
constexpr const char* kJournalFile = "ingest.partial";

// Progress of a long operation: phase ("hashing source", "writing experts", ...), bytes done, bytes in all.
using ProgressFn = std::function<void(std::string_view phase, uint64_t done, uint64_t total)>;

// One part of an expert record: a matrix of n_out rows of n_in values in `type` blocks.
struct ExpertPart {
  std::string tensor;  // source tensor name, e.g. "blk.3.ffn_gate_exps.weight"
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0, n_out = 0;
  int64_t first_row = 0;  // first row of the expert's slab in the source tensor (F for the up half of a fused
                          // ffn_gate_up_exps {H, 2F, E}; 0 otherwise)
  uint64_t offset = 0;    // inside the record
  uint64_t bytes = 0;
  // How the part's rows are laid out in the record: quant::preferred_packing(type, n_out) (Q4_0 with whole
  // 16-row groups is repacked as Q4_0x16, the layout the CPU kernels read fastest; everything else is the
  // GGUF's bytes unchanged).
  quant::RowPacking packing = quant::RowPacking::kNone;
};

struct MoeLayerLayout {
  int layer = 0;  // model layer index (blk.N)
  ExpertPart gate, up, down;
};

// Every record has the same size (record_bytes, the largest layer's need rounded up to kRecordAlign); layers
// may differ in their parts' block types (e.g. Q4_K_M files that store some down projections as Q6_K).
struct Layout {
  int n_moe_layers = 0;
  int n_expert = 0;
  uint64_t record_bytes = 0;           // multiple of kRecordAlign; identical for every record of the store
  std::vector<MoeLayerLayout> layers;  // index = MoE layer index (0 = first layer with experts)
  uint64_t record_offset(int moe_layer, int expert) const {
    return (static_cast<uint64_t>(moe_layer) * static_cast<uint64_t>(n_expert) +
            static_cast<uint64_t>(expert)) *
           record_bytes;
  }
  uint64_t n_records() const { return static_cast<uint64_t>(n_moe_layers) * static_cast<uint64_t>(n_expert); }
  uint64_t experts_bytes() const { return n_records() * record_bytes; }
};

struct SourceInfo {
  std::string name;  // file name of the source GGUF
  uint64_t size = 0;
  std::string sha256;  // hex
};

struct DenseTensorChecksum {
  std::string name;
  uint64_t xxh3 = 0;  // of the tensor's bytes (without the alignment padding)
};

// An opened, validated store. open() refuses (df::Error with the reason and the fix: "re-run diskformer
// ingest
// ...") a store that is incomplete, of another format version, whose files have the wrong sizes, or whose
// manifest is malformed.
class Store {
 public:
  static Store open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::string experts_path() const;
  std::string dense_path() const;
  const std::string& architecture() const { return arch_; }
  const SourceInfo& source() const { return source_; }
  const Layout& layout() const { return layout_; }
  uint64_t record_checksum(int moe_layer,
                           int expert) const;  // xxh3-64 of the whole record (padding included)
  const std::vector<DenseTensorChecksum>& dense_checksums() const { return dense_checksums_; }
  // Full verification: every record's and dense tensor's checksum. Throws df::Error naming the first bad
  // record (file, MoE layer, expert, byte range) and returns the number of bytes checked.
  uint64_t verify(bool show_progress) const;
  uint64_t verify(const ProgressFn& progress) const;

  // Throws "store /x was made from a.gguf (sha256 ...), not b.gguf (sha256 ...)" unless `actual` is the
  // source this store was ingested from (size and sha256 decide; the file name may differ).
  void check_source(const SourceInfo& actual) const;
  // The command that rebuilds this store, for error messages: "diskformer ingest a.gguf -o /x --force".
  std::string reingest_command() const;

 private:
  std::string dir_, arch_;
  SourceInfo source_;
  Layout layout_;
  std::vector<uint64_t> record_checksums_;
  std::vector<DenseTensorChecksum> dense_checksums_;
  uint64_t dense_bytes_ = 0;
};

}  // namespace df::store

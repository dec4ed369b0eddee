#pragma once
// Slots for expert records in a backend's memory: the upper tier of the expert cache
// (stream/tiered_expert_provider.h), filled from records in host memory (the RAM tier's slots). On a GPU
// the slots are VRAM and a fill is a copy on a copy stream that compute waits for on the device; on the CPU
// backend they are host memory and a fill is a memcpy (the stand-in that lets CI test the tier chain).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "gguf/ggml_types.h"
#include "quant/q4_0x16.h"

namespace df::backend {

// One matrix of a record (an expert's gate, up or down) as the expert store holds it.
struct RecordPart {
  size_t offset = 0;  // from the record's start
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  quant::RowPacking packing = quant::RowPacking::kNone;
  size_t bytes() const { return ggml_row_bytes(type, n_in) * static_cast<size_t>(n_out); }
};

class RecordSlots {
 public:
  virtual ~RecordSlots() = default;
  virtual int slots() const = 0;
  virtual size_t slot_bytes() const = 0;
  // The slot's copy of the part at `offset`, in the backend's memory and packing
  // (Backend::preferred_packing): part(s, offset) = part(0, offset) + s * slot_bytes(), so that the slots are
  // a stack of records.
  virtual const void* part(int slot, size_t offset) const = 0;
  // Starts copying a record from host memory into the slot, each part converted to the backend's packing.
  // Ops issued after use(slot) read the new bytes; those issued before retire(slot) read the old ones. The
  // host bytes must stay as they are until host_done(slot).
  virtual void fill(int slot, const uint8_t* host_record, std::span<const RecordPart> parts) = 0;
  // Ops issued after this call read the slot's last fill (on a GPU the compute stream waits for its copy on
  // the device; the host never waits). Until then compute does not wait for the copy, so a record read
  // ahead travels while the ops before its use run.
  virtual void use(int slot) = 0;
  // Whether the last fill of the slot has finished reading its host bytes (never blocks).
  virtual bool host_done(int slot) = 0;
  // Blocks until it has.
  virtual void wait_host_done(int slot) = 0;
  // The ops issued so far are the last that read the slot's current bytes: a later fill waits for them.
  virtual void retire(int slot) = 0;
  // "64 slots x 4.50 MiB = 288 MiB of VRAM".
  virtual std::string describe() const = 0;
};

}  // namespace df::backend

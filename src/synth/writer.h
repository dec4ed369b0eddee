#pragma once
// Writes a synthetic model GGUF: metadata with the real key set of the architecture, the synthetic
// vocabulary, and random weights generated tensor by tensor (bounded memory: one tensor at a time), written
// to a temporary name and renamed. The same Config gives the same bytes.
#include <cstdint>
#include <functional>
#include <string>

#include "gguf/gguf.h"
#include "synth/config.h"
#include "synth/vocab.h"
#include "synth/weights.h"

namespace df::synth {

struct WriteOptions {
  int threads = 0;  // quantization workers; 0: hardware concurrency (at most 16)
  // Called after each tensor with the bytes of tensor data written so far and in all.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct WriteSummary {
  uint64_t tensor_bytes = 0;  // sum of the tensors' sizes (the file adds metadata and alignment padding)
  size_t n_tensors = 0;
};

// The tokenizer.* keys of a vocabulary, in the order the converters write them (used by make_writer; public
// for tests, which write vocabulary-only files).
void write_vocab(gguf::Writer& w, const Vocab& v);

// The metadata and tensor table, without data (used by write_model; public for tests).
gguf::Writer make_writer(const Config& c, const Vocab& v, const std::vector<TensorRecipe>& tensors);

// Validates c (df::Error on bad values) and writes the file.
WriteSummary write_model(const Config& c, const std::string& path, const WriteOptions& opt = {});

}  // namespace df::synth

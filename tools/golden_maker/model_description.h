// `model` of the fixture: shape, block types, special ids and the architecture's metadata, from the GGUF
// itself.
#pragma once

#include <string>
#include <vector>

#include "common.h"
#include "llama.h"

namespace golden_maker {

// Reads the GGUF's metadata and tensor types directly (gguf.h): llama.h exposes no tensor types.
json describe_model(const std::string& path, const llama_vocab* vocab, std::vector<int>& special_ids_out);

}  // namespace golden_maker

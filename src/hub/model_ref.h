#pragma once
// What `diskformer pull NAME` and `-hf NAME` name: a known model ("lfm2.5-24b"), or a Hugging Face
// repository with an optional choice of file: "ORG/NAME", "ORG/NAME:QUANT", "ORG/NAME/FILE.gguf".
#include <string>
#include <string_view>

#include "hub/file_choice.h"
#include "hub/known_models.h"

namespace df::hub {

struct ModelRef {
  std::string spec;  // as given
  std::string repo;
  FileSelector selector;
  std::string revision;             // what to ask the hub for: the pin's commit, --revision, or "main"
  const KnownModel* pin = nullptr;  // a built-in pin: file, commit, sha256 and size are checked exactly
};

// Validates every part (names.h). A repository and selector that a pin of known_models() covers (same
// repository; the pin's file, a quant tag of it, or no selector) take the pin, unless `revision` asks for
// another commit. `revision` empty: the pin's or "main".
ModelRef parse_model_ref(std::string_view spec, std::string_view revision = {});

}  // namespace df::hub

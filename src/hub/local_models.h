#pragma once
// The models on this machine, as `diskformer list` shows them and `diskformer rm` removes them: pulled
// entries under CACHE/models/ (pull_record.h) and the stores that `-m FILE.gguf` made under CACHE/
// (16 hex digits of the source's sha256).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hub/model_ref.h"
#include "hub/pull_record.h"

namespace df::hub {

struct LocalModel {
  std::string name;  // what `rm` takes
  std::string dir;
  std::optional<PullRecord> record;  // pulled models
  std::string source;                // "ORG/REPO/FILE", or the GGUF a store was ingested from
  std::string state;   // "ready", "downloaded 42%", "not ingested", "incomplete", "damaged: ..."
  uint64_t bytes = 0;  // on disk
  bool ready = false;
};

std::vector<LocalModel> list_local_models(const std::string& cache_root);

// NAME as `list` shows it, a known model's short name, or ORG/REPO[:QUANT|/FILE] that names exactly one
// pulled model; df::Error listing the candidates otherwise.
LocalModel find_local_model(const std::string& cache_root, const std::string& name);

// Removes the model's directory (after taking its lock, so never under a running pull); the bytes freed.
uint64_t remove_local_model(const LocalModel& model);

// The one complete pulled store that `ref` names (the same repository, file or quant tag, and revision), if
// there is exactly one.
std::optional<LocalModel> find_pulled(const std::string& cache_root, const ModelRef& ref);

}  // namespace df::hub

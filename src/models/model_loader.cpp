// load_model: one entry per supported architecture.
#include "gguf/gguf.h"
#include "models/lfm2moe.h"
#include "models/model.h"
#include "util/error.h"

namespace df::models {

std::unique_ptr<Model> load_model(const gguf::File& file, const LoadOptions& options) {
  const std::string arch = file.require_string("general.architecture");
  if (arch == "lfm2moe") return load_lfm2moe(file, options);
  fail("{}: unsupported architecture '{}' (supported: lfm2moe)", file.path(), arch);
}

}  // namespace df::models

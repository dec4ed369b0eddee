// load_model: one entry per supported architecture.
#include "gguf/gguf.h"
#include "models/gemma4.h"
#include "models/gpt_oss.h"
#include "models/hy_v3.h"
#include "models/lfm2moe.h"
#include "models/model.h"
#include "models/qwen35moe.h"
#include "models/qwen3moe.h"
#include "util/error.h"

namespace df::models {

std::unique_ptr<Model> load_model(const gguf::File& file, const LoadOptions& options) {
  const std::string arch = file.require_string("general.architecture");
  if (arch == "lfm2moe") return load_lfm2moe(file, options);
  if (arch == "qwen3moe") return load_qwen3moe(file, options);
  if (arch == "gpt-oss") return load_gpt_oss(file, options);
  if (arch == "hy_v3") return load_hy_v3(file, options);
  if (arch == "qwen35moe") return load_qwen35moe(file, options);
  if (arch == "gemma4") return load_gemma4(file, options);
  fail("{}: unsupported architecture '{}' (supported: {})", file.path(), arch, kSupportedArchitectures);
}

}  // namespace df::models

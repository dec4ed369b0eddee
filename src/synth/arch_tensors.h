#pragma once
// A synthetic Config as the loader would read it back: the architecture's config struct, and from it the
// tensor list of the architecture's description (models/<arch>_tensors.h), which make-model writes as is.
#include <vector>

#include "models/gemma4.h"
#include "models/hy_v3.h"
#include "models/lfm2moe.h"
#include "models/qwen3moe.h"
#include "models/tensor_desc.h"
#include "synth/config.h"

namespace df::synth {

models::Lfm2MoeConfig lfm2moe_config_of(const Config& c);
models::Qwen3MoeConfig qwen3moe_config_of(const Config& c);
models::HyV3Config hy_v3_config_of(const Config& c);
models::Gemma4Config gemma4_config_of(const Config& c);

// Every tensor the model binds, in file order.
std::vector<models::TensorDesc> described_tensors(const Config& c);

}  // namespace df::synth

#include "backend/cpu/f16_table.h"

#include <vector>

#include "quant/quant.h"

namespace df::backend {

const float* f16_to_f32_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = quant::fp16_to_fp32(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

}  // namespace df::backend

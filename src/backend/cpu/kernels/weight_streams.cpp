#include "backend/cpu/kernels/weight_streams.h"

#include "backend/cpu/kernels/cpu_features.h"
#include "util/env_int.h"

namespace df::kernels {
namespace {

WeightStreams choose() {
  WeightStreams w;  // one stream, no hints
  if (cpu_vendor_is_intel()) w.prefetch_bytes = 4096;
  w.streams = env_int("DF_Q4_0X16_STREAMS", 1, 2, w.streams);
  w.prefetch_bytes = env_int("DF_Q4_0X16_PREFETCH", 0, 1 << 20, w.prefetch_bytes);
  return w;
}

}  // namespace

const WeightStreams& weight_streams() {
  static const WeightStreams w = choose();
  return w;
}

}  // namespace df::kernels

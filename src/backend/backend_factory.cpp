#include "backend/backend_factory.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "util/error.h"

namespace df::backend {
namespace {

void check_device(const std::string& device) {
  const auto names = device_names();
  if (std::find(names.begin(), names.end(), device) != names.end()) return;
  if (device.rfind("cuda", 0) == 0)
    fail("--device {}: this build has no CUDA backend (devices: {})", device, fmt::join(names, ", "));
  fail("--device {}: unknown device (devices: {})", device, fmt::join(names, ", "));
}

}  // namespace

std::vector<std::string> device_names() { return {"cpu"}; }

std::shared_ptr<Backend> make_backend(const BackendOptions& options) {
  check_device(options.device);
  return std::make_shared<CpuBackend>(options.n_threads);
}

size_t attention_scratch_floats_for(const BackendOptions& options, int n_ctx, int head_dim) {
  check_device(options.device);
  // As the pool counts them (thread_pool.cpp): one per hardware thread when not given.
  const int threads = options.n_threads > 0
                          ? options.n_threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return CpuBackend::attention_scratch_floats_for(n_ctx, head_dim, threads);
}

}  // namespace df::backend

#include "backend/backend_factory.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "util/comma_list.h"
#include "util/error.h"
#if defined(DF_HAVE_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace df::backend {
namespace {

// "cuda" is GPU 0, "cuda:N" GPU N; -1 for anything else.
[[maybe_unused]] int cuda_index(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5) return -1;
  int n = -1;
  const char* b = device.data() + 5;
  const char* e = device.data() + device.size();
  const auto [p, ec] = std::from_chars(b, e, n);
  return ec == std::errc() && p == e && n >= 0 ? n : -1;
}

void check_device(const std::string& device) {
  const auto names = device_names();
  if (device == "cpu") return;
  if (device.rfind("cuda", 0) == 0) {
#if defined(DF_HAVE_CUDA)
    if (cuda_index(device) >= 0) return;
    fail("--device {}: not a CUDA device name (cuda or cuda:N; devices: {})", device, fmt::join(names, ", "));
#else
    fail(
        "--device {}: this build has no CUDA backend: rebuild with nvcc installed (cmake -DDF_CUDA=ON) "
        "(devices: {})",
        device, fmt::join(names, ", "));
#endif
  }
  fail("--device {}: unknown device (devices: {})", device, fmt::join(names, ", "));
}

}  // namespace

std::vector<std::string> device_names() {
#if defined(DF_HAVE_CUDA)
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

std::vector<std::string> device_list(const std::string& spec) {
  std::vector<std::string> out;
  for (const std::string& name : comma_items(spec)) {
    if (name.empty()) fail("--device {}: an empty device name in the list", spec);
    if (name == "cuda:all") {
#if defined(DF_HAVE_CUDA)
      int n = 0;
      try {
        n = CudaBackend::device_count();
      } catch (const Error& e) {
        fail("--device {}: {}", spec, e.what());
      }
      if (n == 0) fail("--device {}: the driver sees no GPU", spec);
      for (int i = 0; i < n; ++i) out.push_back(fmt::format("cuda:{}", i));
#else
      check_device(name);  // this build has no CUDA backend: says so
#endif
    } else {
      check_device(name);
      out.push_back(name);
    }
  }
  return out;
}

std::shared_ptr<Backend> make_backend(const BackendOptions& options) {
  check_device(options.device);
#if defined(DF_HAVE_CUDA)
  if (options.device != "cpu") {
    try {
      return std::make_shared<CudaBackend>(cuda_index(options.device), options.n_threads);
    } catch (const Error& e) {
      fail("--device {}: {}", options.device, e.what());
    }
  }
#endif
  return std::make_shared<CpuBackend>(options.n_threads);
}

size_t attention_scratch_floats_for(const BackendOptions& options, int n_ctx, int head_dim) {
  check_device(options.device);
#if defined(DF_HAVE_CUDA)
  if (options.device != "cpu") return CudaBackend::attention_scratch_floats_for(n_ctx, head_dim);
#endif
  // As the pool counts them (thread_pool.cpp): one per hardware thread when not given.
  const int threads = options.n_threads > 0
                          ? options.n_threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return CpuBackend::attention_scratch_floats_for(n_ctx, head_dim, threads);
}

}  // namespace df::backend

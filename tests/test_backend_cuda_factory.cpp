// The factory's CUDA device names and their errors: with a CUDA build on a machine without a GPU, without a
// CUDA build, and for device numbers out of range. Runs everywhere (no GPU needed).
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/backend_factory.h"
#include "error_matchers.h"

namespace df::backend {
namespace {

bool built_with_cuda() {
  const auto names = device_names();
  return std::find(names.begin(), names.end(), "cuda") != names.end();
}

TEST(BackendFactoryCuda, CudaDevicesAreMadeOrRefusedWithTheReason) {
  const auto names = device_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "cpu");
  if (!built_with_cuda()) {
    df::testing::expect_error(
        [] {
          make_backend({"cuda", 1});
        },
        {"--device cuda: this build has no CUDA backend", "rebuild", "devices: cpu"});
    df::testing::expect_error([] { make_backend({"cuda:1", 1}); }, {"--device cuda:1", "no CUDA backend"});
    df::testing::expect_error([] { attention_scratch_floats_for({"cuda", 1}, 16, 64); }, {"no CUDA backend"});
    return;
  }
  df::testing::expect_error([] { make_backend({"cuda:x", 1}); }, {"--device cuda:x: not a CUDA device name"});
  df::testing::expect_error([] { make_backend({"cudax", 1}); }, {"--device cudax: not a CUDA device name"});
  EXPECT_GT(attention_scratch_floats_for({"cuda", 1}, 16, 64), 0u);
  // GPU 999 exists nowhere: either no device can be used at all (cudaGetDeviceCount's error, named), or the
  // message says how many there are.
  const std::string msg = df::testing::expect_error(
      [] {
        make_backend({"cuda:999", 1});
      },
      {"--device cuda:999: "});
  EXPECT_TRUE(msg.find("does not exist: this machine has") != std::string::npos ||
              msg.find("no CUDA device can be used") != std::string::npos)
      << msg;
  try {
    auto be = make_backend({"cuda", 1});
    EXPECT_EQ(be->name(), "cuda:0");
  } catch (const df::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda: no CUDA device can be used"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace df::backend

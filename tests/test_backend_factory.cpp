// The backend factory: the devices this build has, a working backend for each, and a clear error for the
// rest.
#include <gtest/gtest.h>

#include "backend/backend_factory.h"
#include "error_matchers.h"

namespace df::backend {
namespace {

TEST(BackendFactory, MakesTheCpuBackendAndRefusesUnknownDevicesByName) {
  ASSERT_FALSE(device_names().empty());
  EXPECT_EQ(device_names().front(), "cpu");  // "cuda" follows in a CUDA build (test_backend_cuda_factory)
  auto be = make_backend({"cpu", 2});
  ASSERT_NE(be, nullptr);
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_EQ(be->n_threads(), 2);
  EXPECT_EQ(attention_scratch_floats_for({"cpu", 2}, 100, 64), be->attention_scratch_floats(100, 64));
  df::testing::expect_error([] { make_backend({"tpu", 1}); }, {"--device tpu: unknown device (devices: cpu"});
}

}  // namespace
}  // namespace df::backend

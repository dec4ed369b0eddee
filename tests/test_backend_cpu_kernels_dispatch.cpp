// Level selection (DF_SIMD override, support checks) and the dispatch table's contract: the kernels of a
// type carry its activation format and the level that implements them, and misuse is a df::Error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "backend/cpu/kernels/vec_dot.h"
#include "quant/quant.h"
#include "util/error.h"

namespace df::kernels {
namespace {

// Sets DF_SIMD for the scope of a test and restores it afterwards.
class ScopedSimdEnv {
 public:
  explicit ScopedSimdEnv(const char* value) {
    if (const char* old = std::getenv("DF_SIMD")) saved_ = old;
    if (value) {
      setenv("DF_SIMD", value, 1);
    } else {
      unsetenv("DF_SIMD");
    }
  }
  ~ScopedSimdEnv() {
    if (saved_) {
      setenv("DF_SIMD", saved_->c_str(), 1);
    } else {
      unsetenv("DF_SIMD");
    }
  }

 private:
  std::optional<std::string> saved_;
};

TEST(SimdLevels, NamesRoundTrip) {
  for (SimdLevel level : kAllSimdLevels) EXPECT_EQ(parse_simd_level(simd_level_name(level)), level);
  EXPECT_EQ(parse_simd_level("avx"), std::nullopt);
  EXPECT_EQ(parse_simd_level("AVX2"), std::nullopt);
  EXPECT_EQ(parse_simd_level(""), std::nullopt);
}

TEST(SimdLevels, BestLevelIsSupportedAndNoLowerThanAnySupportedOne) {
  EXPECT_TRUE(simd_level_supported(SimdLevel::kScalar));
  const SimdLevel best = best_simd_level();
  EXPECT_TRUE(simd_level_supported(best));
  for (SimdLevel level : kAllSimdLevels) {
    if (simd_level_supported(level)) {
      EXPECT_LE(static_cast<int>(level), static_cast<int>(best));
    }
  }
  // AVX-512 kernels use the AVX2 set too.
  if (simd_level_supported(SimdLevel::kAvx512)) {
    EXPECT_TRUE(simd_level_supported(SimdLevel::kAvx2));
  }
}

TEST(SimdLevels, EnvironmentOverridesTheChoice) {
  {
    ScopedSimdEnv env(nullptr);
    EXPECT_EQ(select_simd_level(), best_simd_level());
  }
  {
    ScopedSimdEnv env("");
    EXPECT_EQ(select_simd_level(), best_simd_level());
  }
  for (SimdLevel level : kAllSimdLevels) {
    ScopedSimdEnv env(std::string(simd_level_name(level)).c_str());
    if (simd_level_supported(level)) {
      EXPECT_EQ(select_simd_level(), level);
      EXPECT_EQ(vec_dot_kernels(GgmlType::Q4_K).level, level);
    } else {
      EXPECT_THROW(select_simd_level(), Error) << simd_level_name(level);
    }
  }
  ScopedSimdEnv env("sse9");
  try {
    select_simd_level();
    FAIL() << "DF_SIMD=sse9 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sse9"), std::string::npos) << e.what();
  }
}

TEST(VecDotDispatch, EveryWeightTypeHasKernelsAtEverySupportedLevel) {
  for (GgmlType w : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4}) {
    for (SimdLevel level : kAllSimdLevels) {
      if (!simd_level_supported(level)) {
        EXPECT_THROW(vec_dot_kernels(w, level), Error);
        continue;
      }
      const VecDotKernels& k = vec_dot_kernels(w, level);
      EXPECT_EQ(k.weight, w);
      EXPECT_EQ(k.activation, quant::vec_dot_type(w));
      EXPECT_EQ(k.level, level) << ggml_type_name(w) << " at " << simd_level_name(level);
      EXPECT_NE(k.dot, nullptr);
      EXPECT_NE(k.gemm, nullptr);
    }
  }
}

TEST(VecDotDispatch, UnknownTypesAndFormatsAreErrors) {
  EXPECT_THROW(vec_dot_kernels(GgmlType::Q5_0, SimdLevel::kScalar), Error);
  EXPECT_THROW(vec_dot_kernels(GgmlType::Q8_K, SimdLevel::kScalar), Error);
  EXPECT_THROW(activation_quantizer(GgmlType::Q4_0, SimdLevel::kScalar), Error);
  EXPECT_NO_THROW(activation_quantizer(GgmlType::Q8_K, best_simd_level()));
}

TEST(VecDotDispatch, RowLengthsAreChecked) {
  EXPECT_NO_THROW(check_row_length(GgmlType::Q4_K, 512));
  EXPECT_NO_THROW(check_row_length(GgmlType::Q4_0, 0));
  EXPECT_NO_THROW(check_row_length(GgmlType::F16, 7));
  EXPECT_THROW(check_row_length(GgmlType::Q4_K, 100), Error);
  EXPECT_THROW(check_row_length(GgmlType::Q4_0, -32), Error);
  EXPECT_THROW(check_row_length(GgmlType::MXFP4, 48), Error);
  EXPECT_THROW(check_row_length(GgmlType::Q5_0, 32), Error);
  try {
    check_row_length(GgmlType::Q6_K, 300);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("300"), std::string::npos) << msg;
    EXPECT_NE(msg.find("256"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace df::kernels

// The CPU paths every fixture runs on and the three sequences each of them runs.
#pragma once

#include <vector>

namespace golden_maker {

struct PathDef {
  const char* key;
  const char* backend;
  bool no_repack;
  int threads;
  const char* what;
};

// "ref" stands for the reference's CPU variant (--cpu, default zen4)
inline constexpr PathDef kRef = {"reference", "ref", false, 1, ""};
inline const std::vector<PathDef> kPaths = {
    {"no_repack", "ref", true, 1,
     "same variant, --no-repack (plain ggml_vec_dot kernels, no q4_0_8x8 / q8_0 4x8 copies)"},
    {"threads2", "ref", false, 2, "same as the reference with 2 threads"},
    {"avx2", "haswell", false, 1, "libggml-cpu-haswell.so (AVX2/FMA kernels)"},
    {"sse42", "sse42", false, 1, "libggml-cpu-sse42.so (SSE4.2 kernels)"},
    {"scalar", "x64", false, 1, "libggml-cpu-x64.so (no SIMD: generic C kernels)"},
};

inline constexpr const char* kSeqs[3] = {"short", "medium", "long"};
inline constexpr int kNPredict = 32;
inline constexpr int kExtend = 31;

}  // namespace golden_maker

#pragma once
// Instruction-set levels of the CPU kernels and the run-time choice between them. Kernels for a level live in
// files named *_avx2.cpp / *_avx512.cpp, compiled for that instruction set; nothing reaches them unless the
// CPU and the OS support the level (the OS must save the wider registers on context switches, which
// XGETBV reports).
#include <optional>
#include <string_view>

namespace df::kernels {

enum class SimdLevel {
  kScalar,  // the references of quant/, always available
  kAvx2,    // AVX2 + FMA + F16C
  kAvx512,  // AVX-512 F/BW/VL/DQ/VNNI (used through 256-bit registers, see vec_dot.h) + the AVX2 set
};

inline constexpr SimdLevel kAllSimdLevels[] = {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512};

std::string_view simd_level_name(SimdLevel level);  // "scalar", "avx2", "avx512"
std::optional<SimdLevel> parse_simd_level(std::string_view name);

// Whether this CPU and OS can run the kernels of a level (kScalar: always).
bool simd_level_supported(SimdLevel level);
// The fastest supported level.
SimdLevel best_simd_level();

// Whether CPUID names the vendor GenuineIntel (some tuning follows the vendor's prefetchers:
// weight_streams.h).
bool cpu_vendor_is_intel();

// The level to run with: DF_SIMD (scalar|avx2|avx512) when set and not empty, else best_simd_level().
// Throws df::Error for an unknown DF_SIMD value and for a level this machine cannot run.
SimdLevel select_simd_level();

}  // namespace df::kernels

// CPUID feature bits plus the OS's XSAVE state: a CPU with AVX-512 under an OS (or hypervisor) that does not
// save the ZMM/opmask registers must not run AVX-512 code. libgcc's __builtin_cpu_supports applies the same
// XCR0 rule, but clang 14's does not know every feature name used here (f16c), so CPUID is read directly.
#include "backend/cpu/kernels/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "util/error.h"

namespace df::kernels {
namespace {

// XCR0 bits: 1 SSE, 2 AVX (YMM upper halves), 5..7 AVX-512 (opmask, ZMM0-15 upper halves, ZMM16-31).
constexpr uint64_t kXcr0Avx = 0x6;
constexpr uint64_t kXcr0Avx512 = 0xE6;

// CPUID bits (Intel SDM vol. 2, CPUID; AMD implements the same ones).
constexpr unsigned kLeaf1EcxFma = 1u << 12, kLeaf1EcxOsxsave = 1u << 27, kLeaf1EcxAvx = 1u << 28,
                   kLeaf1EcxF16c = 1u << 29;
constexpr unsigned kLeaf7EbxAvx2 = 1u << 5, kLeaf7EbxAvx512f = 1u << 16, kLeaf7EbxAvx512dq = 1u << 17,
                   kLeaf7EbxAvx512bw = 1u << 30, kLeaf7EbxAvx512vl = 1u << 31;
constexpr unsigned kLeaf7EcxAvx512vnni = 1u << 11;

bool all(unsigned reg, unsigned bits) { return (reg & bits) == bits; }

struct Support {
  bool avx2 = false, avx512 = false;
};

Support detect() {
  Support s;
  unsigned eax, ebx, ecx1, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx1, &edx)) return s;
  if (!all(ecx1, kLeaf1EcxOsxsave)) return s;  // XGETBV itself would fault
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint64_t xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  unsigned ebx7 = 0, ecx7 = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx7, &ecx7, &edx)) return s;
  s.avx2 = (xcr0 & kXcr0Avx) == kXcr0Avx && all(ecx1, kLeaf1EcxAvx | kLeaf1EcxFma | kLeaf1EcxF16c) &&
           all(ebx7, kLeaf7EbxAvx2);
  s.avx512 = s.avx2 && (xcr0 & kXcr0Avx512) == kXcr0Avx512 &&
             all(ebx7, kLeaf7EbxAvx512f | kLeaf7EbxAvx512dq | kLeaf7EbxAvx512bw | kLeaf7EbxAvx512vl) &&
             all(ecx7, kLeaf7EcxAvx512vnni);
  return s;
}

const Support& support() {
  static const Support s = detect();
  return s;
}

}  // namespace

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

std::optional<SimdLevel> parse_simd_level(std::string_view name) {
  for (SimdLevel level : kAllSimdLevels) {
    if (simd_level_name(level) == name) return level;
  }
  return std::nullopt;
}

bool simd_level_supported(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return true;
    case SimdLevel::kAvx2:
      return support().avx2;
    case SimdLevel::kAvx512:
      return support().avx512;
  }
  return false;
}

SimdLevel best_simd_level() {
  if (support().avx512) return SimdLevel::kAvx512;
  if (support().avx2) return SimdLevel::kAvx2;
  return SimdLevel::kScalar;
}

bool cpu_vendor_is_intel() {
  unsigned max_leaf = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &max_leaf, &ebx, &ecx, &edx)) return false;
  char vendor[12];  // EBX, EDX, ECX
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  return std::string_view(vendor, sizeof vendor) == "GenuineIntel";
}

SimdLevel select_simd_level() {
  const char* env = std::getenv("DF_SIMD");
  if (env == nullptr || *env == '\0') return best_simd_level();
  const auto level = parse_simd_level(env);
  if (!level) fail("DF_SIMD={}: unknown SIMD level (use scalar, avx2 or avx512)", env);
  if (!simd_level_supported(*level)) {
    fail("DF_SIMD={}: this CPU (or its OS) does not support that level; the best it supports is {}", env,
         simd_level_name(best_simd_level()));
  }
  return *level;
}

}  // namespace df::kernels
